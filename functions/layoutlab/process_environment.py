"""Keep a task's credentials out of what a file on its machine can show.

In Lambda the function's role credentials are environment variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), and ``/proc/self/environ`` shows the process's
*initial* environment block, whatever the process has changed since (``setenv`` and ``unsetenv``
move pointers; they do not rewrite the block). An uploaded HDF5 file can name that file as a
dataset's external storage, and a converter that read it would copy the credentials into a variant.
``layoutlab.hdf5_input`` refuses such datasets; this module is the second wall, so that even a path
to a local file nobody has thought of shows no credentials:

- ``hide_initial_environment``: copy every variable to the heap (``os.putenv``: glibc's ``setenv``
  allocates a new string and repoints ``environ``), then overwrite the initial block with zeros. The
  process keeps its whole environment (``os.environ``, C ``getenv``, Rust's ``std::env``); the file
  ``/proc/self/environ`` shows nothing.
- ``drop_credentials``: a worker that converts a user's file and talks to no cloud service gets none
  of the credential variables at all.

Written by hand: no library does either; the only system interfaces used are ``/proc/self/stat``
(fields 50-51, ``env_start`` / ``env_end``, Linux 3.5+) and ``memset``.
"""

from __future__ import annotations

import ctypes
import os

# Variables that hold or lead to cloud credentials (the container credentials endpoint's token too).
CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)

_hidden = False


def _initial_block() -> tuple[int, int] | None:
    """(start, end) addresses of this process's initial environment block, or None where not on Linux."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[50 - 3]), int(fields[51 - 3])  # (fields after the name start at field 3)
    except (OSError, IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None


def hide_initial_environment() -> bool:
    """Zero the initial environment block after moving every variable to the heap; True when done."""
    global _hidden
    if _hidden:
        return True
    block = _initial_block()
    if block is None:
        return False
    for name, value in os.environ.items():
        os.putenv(name, value)  # a heap copy, and environ[] points at it
    start, end = block
    ctypes.memset(start, 0, end - start)
    _hidden = True
    return True


def drop_credentials() -> None:
    """Remove every credential variable from this process's environment (a worker that needs none)."""
    for name in CREDENTIAL_VARIABLES:
        os.environ.pop(name, None)
