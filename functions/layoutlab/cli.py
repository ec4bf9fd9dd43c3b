"""The ``layoutlab`` command line.

Subcommands live in ``layoutlab.commands``; each module registers itself.
Errors a user can fix (bad input, missing files) are raised as
``layoutlab.errors.UserError`` and printed as one line naming the file and the
reason, with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os

# Before anything imports numpy: its bundled OpenBLAS starts a worker thread per extra
# core at import (~0.09 s of CPU on 2 cores, and a pthread_atfork shutdown on every fork, e.g.
# layoutlab.guard's). No command does linear algebra worth threads (report/model.py
# fits a handful of points). OPENBLAS_NUM_THREADS alone is enough (OMP_NUM_THREADS,
# which other libraries read too, is left alone); a value the user has set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if os.uname().sysname == "Linux":
    # h5py's import reads platform.uname() as a tuple, whose last field, the processor
    # name, Python gets on Linux by running `uname -p` in a subprocess (importing
    # subprocess, fork, exec: ~7 ms of every start) to learn what GNU uname reports
    # as "unknown" and platform turns into "". Record that answer without asking.
    import platform

    try:
        platform.uname().__dict__.setdefault("processor", "")
    except AttributeError:  # (a Python whose uname_result has no cache to fill)
        pass

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from layoutlab import __version__, commands  # noqa: E402
from layoutlab.errors import Terminated, UserError, unwind_on_sigterm


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``only``: a command's name) one with just that command.

    Importing every command module pulls in their libraries (aiohttp, xarray,
    ...: ~0.6 s); a run of one command needs only its own module.
    """
    parser = argparse.ArgumentParser(
        prog="layoutlab",
        description=(
            "Make Earth-science arrays (HDF5 / NetCDF-4 / Zarr) fast to read from "
            "object storage, and measure it."
        ),
        epilog="Run 'layoutlab COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"layoutlab {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = _command_names()
    for name in [only] if only in names else names:
        module = importlib.import_module(f"{commands.__name__}.{name}")
        module.register(subparsers)
    return parser


def _command_names() -> list[str]:
    # (a directory listing, not pkgutil.iter_modules: that imports inspect and typing, ~10 ms of
    # every start, and layoutlab is never installed zipped)
    names = {Path(entry).stem for directory in commands.__path__ for entry in os.listdir(directory)
             if entry.endswith(".py") and not entry.startswith("_")}
    return sorted(names)


def main(argv: list[str] | None = None) -> int:
    argv_is_the_program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=argv[0]) if argv and argv[0] in _command_names() else build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    unwind_on_sigterm()  # a stopped command removes what it half wrote, as on Ctrl-C
    try:
        from layoutlab import settings

        settings.check()  # a bad LAYOUTLAB_* value: one line naming it, before the command starts
        result = args.func(args)
    except Terminated as stop:
        print(f"layoutlab {args.command}: {stop}; partial outputs removed", file=sys.stderr)
        return 143
    except UserError as error:
        print(f"layoutlab {args.command}: error: {error}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"layoutlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`): stop quietly, as Unix tools do
        return _reader_gone()
    else:
        code = int(result or 0)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    if argv_is_the_program and getattr(args, "exit_without_teardown", False):
        # The command has closed and flushed all it wrote: skip the interpreter's
        # teardown of numpy and h5py (~15 ms) when running as the program (never when
        # main() is called with arguments, as tests do).
        sys.stderr.flush()
        os._exit(code)
    return code


def _reader_gone() -> int:
    """Exit status 141 (SIGPIPE's), with stdout pointed at /dev/null so the interpreter's final flush
    of what is still buffered does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    sys.exit(main())
