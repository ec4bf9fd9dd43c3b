"""What kind of file is this? From its first bytes, or from a path.

``sniff_bytes(head)`` works on the first bytes of an object (the ingest Lambda
reads a ranged GET of ``HEAD_BYTES``); ``sniff(path_or_bytes)`` also accepts a
local path or a Zarr directory. Results: ``"hdf5"``, ``"netcdf4"``,
``"netcdf3"``, ``"zarr"`` or ``"unknown"``.

Written by hand because no library answers this from bytes alone: h5py's
``is_hdf5`` needs a file, and netCDF4/xarray guess engines by opening the file.
"""

from __future__ import annotations

import os
from pathlib import Path

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
NETCDF3_MAGICS = (b"CDF\x01", b"CDF\x02", b"CDF\x05")  # classic, 64-bit offset, 64-bit data
# Enough to hold the HDF5 superblock after a user block of up to 32 KiB and,
# in files written by the netCDF library, usually the root group's
# `_NCProperties` attribute too.
HEAD_BYTES = 64 * 1024
# The netCDF library stamps every file it writes with this root attribute;
# netCDF-4 variables carry `_Netcdf4Dimid` / `_Netcdf4Coordinates`.
NETCDF4_MARKERS = (b"_NCProperties", b"_Netcdf4Dimid", b"_Netcdf4Coordinates")

FORMATS = ("hdf5", "netcdf4", "netcdf3", "zarr", "unknown")


def hdf5_signature_offset(head: bytes) -> int | None:
    """Where the HDF5 signature sits in ``head``: 0, 512, 1024, 2048, ... (after a user block), or None."""
    offset = 0
    while offset + len(HDF5_SIGNATURE) <= len(head):
        if head[offset : offset + len(HDF5_SIGNATURE)] == HDF5_SIGNATURE:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


def head_after_user_block(read_at, size: int) -> bytes | None:
    """``HEAD_BYTES`` from the HDF5 signature of a file whose user block is larger than ``HEAD_BYTES`` can
    hold (HDF5 looks at 0, 512, 1024, ... whatever the size: such a file is valid), or None when there is no
    signature beyond ``HEAD_BYTES``. ``read_at(offset, count)`` reads the file (a ranged GET for S3)."""
    offset = HEAD_BYTES
    while offset + len(HDF5_SIGNATURE) <= size:
        head = read_at(offset, HEAD_BYTES)
        if head[:len(HDF5_SIGNATURE)] == HDF5_SIGNATURE:
            return bytes(head)
        offset *= 2
    return None


def sniff_bytes(head: bytes) -> str:
    """The format of a file whose first bytes are ``head`` (pass at least ``HEAD_BYTES`` when you can).

    An HDF5 file is reported as ``"netcdf4"`` when a netCDF-4 marker appears in
    ``head``; a NetCDF-4 file whose markers lie beyond ``head`` is reported as
    ``"hdf5"`` (it is one). ``sniff`` on a path looks deeper.
    """
    head = bytes(head)
    if head[:4] in NETCDF3_MAGICS:
        return "netcdf3"
    if hdf5_signature_offset(head) is not None:
        return "netcdf4" if any(marker in head for marker in NETCDF4_MARKERS) else "hdf5"
    if _looks_like_zarr_metadata(head):
        return "zarr"
    return "unknown"


def _looks_like_zarr_metadata(head: bytes) -> bool:
    """A ``zarr.json`` / ``.zgroup`` / ``.zarray`` document (the first object of a Zarr store)."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    import json  # (here: `layoutlab repack` imports this module and never needs json)

    try:
        document = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(document, dict) and "zarr_format" in document


def sniff(path_or_bytes: str | os.PathLike | bytes | bytearray | memoryview) -> str:
    """The format of a local file, a Zarr directory, or a byte string."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return sniff_bytes(bytes(path_or_bytes))
    path = Path(path_or_bytes)
    if path.is_dir():
        markers = ("zarr.json", ".zgroup", ".zarray", ".zmetadata")
        return "zarr" if any((path / m).is_file() for m in markers) else "unknown"
    with open(path, "rb") as stream:
        head = stream.read(HEAD_BYTES)
        kind = sniff_bytes(head)
        if kind == "unknown":  # (a user block larger than HEAD_BYTES: the signature lies further on)
            def read_at(offset, count):
                stream.seek(offset)
                return stream.read(count)

            beyond = head_after_user_block(read_at, os.fstat(stream.fileno()).st_size)
            kind = sniff_bytes(beyond) if beyond is not None else kind
    if kind == "hdf5" and _hdf5_file_is_netcdf4(path):
        return "netcdf4"
    return kind


def _hdf5_file_is_netcdf4(path: Path) -> bool:
    from layoutlab.hdf5_input import open_input

    try:
        with open_input(path) as f:
            return is_netcdf4(f)
    except OSError:
        return False


# What netCDF-4 writes as the NAME of a dimension scale that is not also a variable (netCDF-4.0 files
# carry no _NCProperties and often no _Netcdf4Dimid: this is their only marker).
NETCDF_DIMENSION_NAME = b"This is a netCDF dimension but not a netCDF variable"


def is_netcdf4(f) -> bool:
    """An open ``h5py.File`` written as NetCDF-4: the netCDF markers in the root group or its datasets."""
    import h5py

    if "_NCProperties" in f.attrs:
        return True
    for name in f:
        # (the link's kind from HDF5 itself: h5py's get(getlink=True) raises on a user-defined link)
        if f.id.links.get_info(name.encode("utf-8", "surrogateescape")).type != h5py.h5l.TYPE_HARD:
            continue
        if isinstance(f[name], h5py.Dataset):
            attrs = f[name].attrs
            if "_Netcdf4Dimid" in attrs or "_Netcdf4Coordinates" in attrs:
                return True
            label = attrs.get("NAME") if "NAME" in attrs else None
            if isinstance(label, (bytes, str)) and _as_bytes(label).startswith(NETCDF_DIMENSION_NAME):
                return True
    return False


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")


def describe_not_hdf5(head: bytes, size: int | None = None) -> str:
    """A one-line reason why bytes starting with ``head`` are not an HDF5 file (for error messages)."""
    if size == 0 or (size is None and not head):
        return "empty file (0 bytes), not HDF5"
    kind = sniff_bytes(head)
    if kind == "netcdf3":
        return "NetCDF-3 classic file, not HDF5/NetCDF-4 (convert it with 'nccopy -k nc4' first)"
    if kind == "zarr":
        return "Zarr metadata, not an HDF5 file"
    sample = head[:4096]
    if sample and _is_text(sample):
        return "text file, not HDF5 (no HDF5 signature)"
    return "not an HDF5 file (no HDF5 signature at offset 0, 512, 1024, ...)"


def _is_text(sample: bytes) -> bool:
    try:
        text = sample.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(ch.isprintable() or ch in "\r\n\t\f" for ch in text)
