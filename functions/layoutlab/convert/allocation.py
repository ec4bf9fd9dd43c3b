"""Inputs whose superblock's end-of-allocation (EOA) lies before the end of the file: read from a private copy.

The superblock records the end of the address space the file allocated (its "end of file address").
HDF5 refuses to read any object or chunk that lies beyond it ("address of object past end of
allocation", "addr overflow ... eoa = N"). Some real files are written with a stale value, smaller
than where their last objects lie, while every byte of those objects is in the file (ICESat-2 subsets
written by a subsetting service). HDF5's own tool for such files, ``h5clear --increment`` (and the
``--filesize`` check), works the same way as this module: the recorded EOA is raised to cover the
file, after which every object reads as written. Done here on a private copy (the user's file is
never modified), in the output's directory, removed when the repack is done, once a repack of the input
itself has failed (convert/repack.py; files recording a few bytes less than they hold, as PyTables'
do, read as they are); the copy is read in the input's place and the summary says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import struct
from pathlib import Path

from layoutlab.formats.sniff import hdf5_signature_offset

SUPERBLOCK_HEAD = 4096  # bytes read to find the signature (at 0, 512, 1024, 2048) and its fixed fields


def short_allocation(path) -> dict | None:
    """Where the superblock of the HDF5 file ``path`` records its end of allocation, when that lies before
    the end of the file: ``{"at": byte offset of the field, "size": its bytes, "stored": the value,
    "wanted": the value that covers the file, "checksum": (start, end) of the checksummed superblock or
    None}``; None when the allocation covers the file, or the superblock is not one this reads."""
    with open(path, "rb") as stream:
        head = stream.read(SUPERBLOCK_HEAD)
        file_size = os.fstat(stream.fileno()).st_size
    base = hdf5_signature_offset(head)
    if base is None or len(head) < base + 12:
        return None
    version = head[base + 8]
    if version in (0, 1):
        sizeof_addr = head[base + 13]
        fields = base + (24 if version == 0 else 28)  # (version 1 adds the indexed-storage K and 2 reserved bytes)
        checksum = None
    elif version in (2, 3):
        sizeof_addr = head[base + 9]
        fields = base + 12
        checksum = (base, fields + 4 * sizeof_addr)  # (base, extension, EOF and root addresses, then Jenkins lookup3)
    else:
        return None
    if sizeof_addr not in (2, 4, 8) or len(head) < fields + 4 * sizeof_addr + 4:
        return None
    code = {2: "<H", 4: "<I", 8: "<Q"}[sizeof_addr]
    base_address = struct.unpack_from(code, head, fields)[0]
    at = fields + 2 * sizeof_addr  # (v0/1: base, free-space, EOF; v2/3: base, extension, EOF)
    stored = struct.unpack_from(code, head, at)[0]
    # The stored value counts from the base address, which is normally where the superblock lies.
    wanted = file_size - base + base_address
    if stored == (1 << (8 * sizeof_addr)) - 1 or stored >= wanted or wanted >= (1 << (8 * sizeof_addr)):
        return None
    return {"at": at, "size": sizeof_addr, "code": code, "stored": stored, "wanted": wanted, "checksum": checksum}


def _checksum(data: bytes) -> int:
    """HDF5's metadata checksum (Jenkins' lookup3), from the library itself."""
    from layoutlab.hdf5_input import hdf5_library

    function = hdf5_library().H5_checksum_metadata
    function.restype, function.argtypes = ctypes.c_uint32, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32]
    return function(data, len(data), 0)


@contextlib.contextmanager
def covering_allocation(in_path, workdir):
    """Yield ``(path to read, note)``: the input itself and None, or, when its superblock's end of
    allocation lies before the end of the file, a private copy in ``workdir`` whose superblock records
    the whole file as allocated, and a note saying so (the copy is removed afterwards)."""
    short = short_allocation(in_path)
    if short is None:
        yield Path(in_path), None
        return
    copy = Path(workdir) / f".{Path(in_path).name}.layoutlab-allocation-{os.getpid()}"
    try:
        shutil.copyfile(in_path, copy)  # (copy_file_range / reflink where the file system offers them)
        with open(copy, "r+b") as stream:
            stream.seek(short["at"])
            stream.write(struct.pack(short["code"], short["wanted"]))
            if short["checksum"] is not None:
                start, end = short["checksum"]
                stream.seek(start)
                covered = stream.read(end - start)
                stream.seek(end)
                stream.write(struct.pack("<I", _checksum(covered)))
        note = (f"the input's superblock records {short['stored']} bytes allocated, less than the file's "
                f"{short['wanted']}: read from a private copy that records the whole file as allocated (as "
                "h5clear --increment would make it; the input itself is unchanged)")
        yield copy, note
    finally:
        copy.unlink(missing_ok=True)
