"""CLI subcommands, one module each.

Every module here defines ``register(subparsers)``, which adds its subcommand
and sets ``func`` on the parser's defaults. ``layoutlab.cli`` discovers the
modules, so adding a command never means editing a shared list.
"""
