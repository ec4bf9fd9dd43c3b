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

    def __reduce__(self):  # picklable with its two arguments (layoutlab.guard sends it between processes)
        return (type(self), (self.path, self.reason))


# What h5py raises while reading a damaged file: OSError for most HDF5 library
# errors, but also ValueError ("cannot fit 'int' into an offset-sized integer"
# from the file-object driver on a corrupt superblock), KeyError / RuntimeError
# for broken links and object headers, OverflowError for absurd sizes (found by
# tests/unit/test_hdf5_fuzz.py). Callers that read a file the user supplied turn
# these into a ``BadInputFile`` naming the file; the exception type stays in the
# message so a genuine bug is not hidden behind "damaged".
DAMAGED_HDF5_ERRORS = (OSError, ValueError, KeyError, RuntimeError, OverflowError)


# What HDF5 says when it cannot open the file a dataset's values are in (external raw storage, a virtual
# dataset's source): in a confined worker (layoutlab.sandbox), the kernel's refusal of a path outside the
# upload; without one, the pre-pass refuses such a dataset before any read.
OUTSIDE_OPEN_FAILED = ("unable to open external raw data file", "unable to open source file",
                       "unable to open external file", "unable to open virtual")


def damaged_reason(error: BaseException) -> str:
    """One line for a read error on a damaged file: ``Type: first line of the message``, and why a chunk
    was refused when the bounded deflate filter refused it (HDF5 itself says only that a filter failed)."""
    from layoutlab.bounded_decoding import take_refusal

    refusal = take_refusal()
    text = str(error).strip().splitlines()
    if any(said in str(error) for said in OUTSIDE_OPEN_FAILED):
        return (f"its values lie in a file outside the upload, which may not be opened "
                f"({type(error).__name__}: {text[0] if text else 'no detail'})")
    if refusal is not None:
        return f"{type(error).__name__}: {text[0] if text else 'no detail'}: {refusal}"
    return f"{type(error).__name__}: {text[0] if text else 'no detail'}"


def raised_by_h5py(error: BaseException) -> bool:
    """True when ``error`` was raised inside h5py (the HDF5 library reading the file), not by our code."""
    tb = error.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and "h5py" in last.tb_frame.f_code.co_filename


class Terminated(BaseException):
    """SIGTERM arrived (what Lambda, ECS, ``timeout`` and ``kill`` send): unwinds like Ctrl-C, so every
    ``finally`` and cleanup on the way runs (partial outputs removed, workers stopped) before the exit."""


def unwind_on_sigterm() -> None:
    """Turn SIGTERM into ``Terminated`` in this process (main thread only; elsewhere a no-op)."""
    import signal

    def terminated(signum, frame):
        raise Terminated(f"stopped by {signal.Signals(signum).name}")

    try:
        signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread: the default action stays
        pass
