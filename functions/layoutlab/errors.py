"""Errors with a message meant for the user.

A ``UserError`` says which file (or argument) is at fault and why, in one line.
The CLI prints it without a traceback; the pipeline records it as a FAILURE
item with the same text.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a bad request: the user can fix it, the code is not at fault."""


class BadInputFile(UserError):
    """An input file that cannot be processed; the message names the file and the reason."""

    def __init__(self, path: str, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")
