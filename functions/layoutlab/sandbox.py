"""Confine the process that reads an uploaded file's values to that file, its scratch folder and the runtime.

An HDF5 file can make the library that reads it open other files of the machine: external raw
storage names any path, a virtual dataset names source files (or ``"."``, itself, whose sources can
again be external storage or external links), an external link names another file. Checking each
way before reading (``hdf5_input.data_outside_file``) closes the doors someone has listed; this
module closes the building: the worker that reads values restricts itself, before it opens the
input, so that the kernel refuses every open outside

- the runtime, read-only: the interpreter, its standard library, ``sys.path`` (the package, the
  layer, site-packages), the shared libraries already mapped and the system library directories,
  a few files of ``/etc`` that name resolution and TLS read (never ``/etc/passwd``), ``/dev/null``;
- the input file (read-only) and the worker's scratch folder (read-write).

Nothing of ``/proc`` is allowed: neither other processes' environments nor the worker's own
memory. The restriction is Linux Landlock (unprivileged, Linux >= 5.13, ``landlock_create_ruleset``
/ ``landlock_add_rule`` / ``landlock_restrict_self``: syscalls 444-446 on every architecture),
called through ctypes: the PyPI bindings are pre-1.0 or a few months old, and the three calls need
no more than this. Only file-system rights are handled: TCP (the readers' S3 connections) is not
restricted. A Landlock domain binds the calling thread and the children it makes: the worker is a
fork with one thread when it restricts itself (``enter`` refuses otherwise).

Whatever Landlock offers, the worker also sets ``no_new_privs`` and drops every capability: a
process of root that kept ``CAP_SYS_PTRACE`` or ``CAP_DAC_READ_SEARCH`` could read any process's
``/proc/<pid>/environ``, non-dumpable or not. ``make_non_dumpable`` is for the processes that hold
credentials (the local cloud, the task host): ``/proc/<pid>/environ`` and ``/proc/<pid>/mem`` of a
non-dumpable process are closed to other processes of the same user without ``CAP_SYS_PTRACE``.

Where Landlock is missing (kernels before 5.13, or the LSM not enabled, or a seccomp filter that
refuses the calls: see docs/reliability.md for Lambda and Fargate), ``enter`` says why and the
metadata pre-pass (``hdf5_input.data_outside_file``) is the wall. ``LAYOUTLAB_SANDBOX=0`` turns the
restriction off (to test the pre-pass alone); ``LAYOUTLAB_OUTSIDE_FILE_CHECK=0`` turns the pre-pass
off (to test the restriction alone).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import asdict, dataclass

from layoutlab import settings

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 4, 38, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522

# LANDLOCK_ACCESS_FS_* (include/uapi/linux/landlock.h)
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE  # the only rights a rule on a file may carry
_READ_ONLY = _EXECUTE | _READ_FILE | _READ_DIR

# Files of /etc the runtime reads (dynamic loader, name resolution, TLS roots, time zone): never the
# whole directory, which holds /etc/passwd, /etc/shadow and the machine's own configuration.
_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/resolv.conf", "/etc/hosts",
        "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols",
        "/etc/localtime", "/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/etc/crypto-policies")
_SYSTEM = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/share/zoneinfo",
           "/usr/share/ca-certificates", "/sys/devices/system/cpu")
_DEVICES_READ = ("/dev/urandom", "/dev/random")
_DEVICES_WRITE = ("/dev/null",)
# Environment variables naming files the runtime reads (CA bundles, HDF5 plugins).
_PATH_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                   "HDF5_PLUGIN_PATH")


@dataclass(frozen=True)
class Isolation:
    """What held while a worker read an uploaded file's values (recorded in VARIANT and RESULT items)."""

    landlock: bool  # the kernel refuses this worker every open outside its input, scratch and runtime
    landlock_abi: int | None  # the kernel's Landlock ABI version (None: no Landlock)
    reason: str | None  # why Landlock is not in force (None when it is)
    capabilities_dropped: bool  # no_new_privs set and every capability dropped
    outside_file_check: bool  # the metadata pre-pass (hdf5_input.data_outside_file) refuses outside values

    def to_dict(self) -> dict:
        return asdict(self)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when there is none (or a seccomp filter refuses the call)."""
    try:
        version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(version))


def outside_file_check_on() -> bool:
    return bool(settings.value("LAYOUTLAB_OUTSIDE_FILE_CHECK"))


def make_non_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: this process's ``/proc/<pid>/environ``, ``mem`` and the like become
    unreadable to other processes of the same user (without CAP_SYS_PTRACE). For every process that holds
    credentials. True when done (False off Linux)."""
    try:
        return _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def make_dumpable() -> bool:
    """Undo ``make_non_dumpable`` in a worker (a fork inherits the flag) that keeps no credentials and must be
    watched by its parent through ``/proc/<pid>/io`` (guard.py), which a non-dumpable child closes."""
    try:
        return _libc().prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_privileges(libc) -> bool:
    """no_new_privs (Landlock's precondition; an exec can then grant nothing back), then every capability
    of this (single-threaded) process dropped: effective, permitted, inheritable and ambient."""
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    try:
        return libc.capset(ctypes.byref(header), data) == 0
    except AttributeError:
        return False


def _runtime_paths() -> tuple[set[str], set[str], set[str]]:
    """(directories read-only, files read-only, files read-write) the interpreter and its libraries need."""
    home = os.path.realpath(os.path.expanduser("~"))
    too_wide = {"/", home, "/tmp", "/var", "/var/tmp", "/etc", "/proc", "/root", "/home", "/work", "/usr",
                os.path.realpath(os.environ.get("TMPDIR", "/tmp"))}
    directories = set()
    for entry in [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, *sys.path]:
        if entry and os.path.isabs(entry):
            directories.add(entry)
    try:  # the shared libraries this process has mapped, wherever they are (a layer's, the venv's, the system's)
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
                    directories.add(os.path.dirname(parts[5].strip()))
    except OSError:
        pass
    directories.update(_SYSTEM)
    # this process's own status file (its peak memory, VmHWM): a rule on that one file, which holds no secret
    files = {*_ETC, *_DEVICES_READ, "/proc/self/status"}
    for name in _PATH_VARIABLES:
        for entry in os.environ.get(name, "").split(os.pathsep):
            if os.path.isabs(entry):
                files.add(entry)
    directories = {os.path.realpath(d) for d in directories}
    directories = {d for d in directories if d not in too_wide}
    return directories, files, set(_DEVICES_WRITE)


def _add_rule(libc, ruleset: int, path: str, access: int) -> bool:
    class _PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False  # (absent on this machine: nothing to allow)
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        return libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                            ctypes.byref(rule), ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)


def _thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def enter(*, read: list[str] = (), write: list[str] = ()) -> Isolation:
    """Restrict this process, for good, to ``read`` (files or folders, read-only), ``write`` (folders,
    read-write) and the runtime. Call it in a fresh worker (a fork with one thread), before the input is
    opened. Never raises: the returned ``Isolation`` says what is in force and, if Landlock is not, why."""
    check = outside_file_check_on()
    try:
        libc = _libc()
    except OSError:
        return Isolation(False, None, "not Linux: no Landlock", False, check)
    abi = landlock_abi()
    # (before no_new_privs and the capability drop, while /proc/self/maps can still be read)
    directories, files, writable_files = _runtime_paths() if abi and settings.value("LAYOUTLAB_SANDBOX") else (
        set(), set(), set())
    dropped = _drop_privileges(libc)
    if not settings.value("LAYOUTLAB_SANDBOX"):
        return Isolation(False, abi or None, "switched off (LAYOUTLAB_SANDBOX=0)", dropped, check)
    if not abi:
        return Isolation(False, None, f"the kernel ({os.uname().release}) offers no Landlock", dropped, check)
    if _thread_count() != 1:  # Landlock would bind this thread only
        return Isolation(False, abi, "the worker has more than one thread: Landlock would bind only one",
                         dropped, check)
    handled = (1 << 13) - 1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0)
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr's first field: handled_access_fs
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return Isolation(False, abi, f"landlock_create_ruleset failed ({os.strerror(ctypes.get_errno())})",
                         dropped, check)
    try:
        for path in directories | files | set(read):
            _add_rule(libc, ruleset, path, _READ_ONLY)
        for path in writable_files:
            _add_rule(libc, ruleset, path, _READ_FILE | _WRITE_FILE)
        for path in write:
            if not _add_rule(libc, ruleset, path, handled):
                return Isolation(False, abi, f"cannot allow the scratch folder {path}", dropped, check)
        if not dropped and libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return Isolation(False, abi, "prctl(PR_SET_NO_NEW_PRIVS) failed", dropped, check)
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            return Isolation(False, abi, f"landlock_restrict_self failed ({os.strerror(ctypes.get_errno())})",
                             dropped, check)
    finally:
        os.close(ruleset)
    if write:  # temporary files of the libraries go to the scratch folder: /tmp is closed
        import tempfile

        tempfile.tempdir = write[0]
        os.environ["TMPDIR"] = write[0]
    return Isolation(True, abi, None, dropped, check)


def not_entered() -> Isolation:
    """The record of work done in a process that did not restrict itself (no fork available)."""
    return Isolation(False, landlock_abi() or None, "the work ran in the task's own process (no worker)", False,
                     outside_file_check_on())
