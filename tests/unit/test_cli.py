"""The command line: discovery of subcommands, help, and one-line user errors."""

from __future__ import annotations

import argparse

import pytest

from layoutlab import cli
from layoutlab.errors import BadInputFile


def test_help_lists_the_program_and_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    assert "layoutlab" in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_user_error_is_one_line_naming_the_file(monkeypatch, capsys):
    def register(subparsers):
        parser = subparsers.add_parser("explode")

        def run(args):
            raise BadInputFile("/data/x.h5", "not an HDF5 file (signature missing)")

        parser.set_defaults(func=run)

    real_build = cli.build_parser

    def build_with_extra():
        parser = real_build()
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        register(subparsers)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_with_extra)
    assert cli.main(["explode"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["layoutlab explode: error: /data/x.h5: not an HDF5 file (signature missing)"]
