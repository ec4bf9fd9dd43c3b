"""Generators of hostile HDF5 files: files that point at files of the machine that opens them.

Each writes a small valid HDF5 file whose one hostile object would, if read, copy into an output
what the converting process can read: its environment (``/proc/self/environ``: a cloud task's
credentials) or a local file. The canaries are what must never appear in any output.
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np

# Content of the planted local file and value of the planted environment variable: if either turns
# up in an output, the input reached outside itself.
FILE_CANARY = b"LOCALFILE-CANARY-5b1d0e7a"
ENV_CANARY_NAME = "LAYOUTLAB_TEST_CANARY"
ENV_CANARY = "ENVIRON-CANARY-c4f2a91e"
# What the first bytes of an environment dump look like wherever it lands ("NAME=value\0...").
# Bytes of the environment a hostile dataset reads: past the end of the file HDF5 reads zeros, and a
# task's environment (a CI machine's too) fits.
ENVIRON_BYTES = 65536
ENVIRON_MARKERS = (ENV_CANARY.encode(), b"AWS_SECRET_ACCESS_KEY=", b"PATH=/")


def plant_local_secrets(directory: Path) -> dict[str, Path]:
    """A local text file and a local HDF5 file holding the file canary (what a hostile input aims at)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = directory / "secret.txt"
    text.write_bytes(FILE_CANARY * 4)
    secret_h5 = directory / "secret.h5"
    with h5py.File(secret_h5, "w") as f:
        f["secret"] = np.frombuffer(FILE_CANARY * 4, dtype="u1")
    return {"text": text, "hdf5": secret_h5}


def _with_plain_data(f) -> None:
    """A harmless variable beside the hostile one, so a converter has something to convert."""
    f.create_dataset("temperature", data=np.arange(24, dtype="f4").reshape(2, 3, 4), chunks=(1, 3, 4))


def external_environ(path: Path, *, relative: bool = False, fill_value_attr: str | None = None) -> Path:
    """A dataset whose raw storage is the opening process's environment (absolute, or climbing with ``..``)."""
    target = ("../" * 24 + "proc/self/environ") if relative else "/proc/self/environ"
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        notes = f.create_dataset("notes", shape=(ENVIRON_BYTES,), dtype="u1", external=[(target, 0, ENVIRON_BYTES)])
        if fill_value_attr is not None:  # an attribute VirtualiZarr refuses: the dataset would be inlined
            notes.attrs["_FillValue"] = fill_value_attr
    return path


def external_local_file(path: Path, secret: Path) -> Path:
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        f.create_dataset("notes", shape=(len(FILE_CANARY) * 4,), dtype="u1",
                         external=[(str(secret), 0, len(FILE_CANARY) * 4)])
    return path


def virtual_local_file(path: Path, secret_h5: Path) -> Path:
    """A virtual dataset whose source is a dataset of a local file."""
    n = len(FILE_CANARY) * 4
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        layout = h5py.VirtualLayout(shape=(n,), dtype="u1")
        layout[:] = h5py.VirtualSource(os.fspath(secret_h5), "secret", shape=(n,))
        f.create_virtual_dataset("notes", layout, fillvalue=0)
    return path


def external_link_local_file(path: Path, secret_h5: Path) -> Path:
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        f["notes"] = h5py.ExternalLink(os.fspath(secret_h5), "/secret")
    return path


def virtual_self_over_external(path: Path, target: str, size: int = ENVIRON_BYTES) -> Path:
    """A virtual dataset whose source is a dataset of the file itself (``"."``) that has external raw storage
    (``target``: ``/proc/<pid>/environ``, a local file): issue 36's attack. HDF5 opens the source with its
    own access properties, so only a check that follows ``"."`` sources (or a confined reader) stops it."""
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        f.create_dataset("hidden/raw", shape=(size,), dtype="u1", external=[(target, 0, size)])
        layout = h5py.VirtualLayout(shape=(size,), dtype="u1")
        layout[:] = h5py.VirtualSource(".", "/hidden/raw", shape=(size,))
        f.create_virtual_dataset("notes", layout, fillvalue=0)
    return path


def virtual_self_over_external_link(path: Path, secret_h5: Path) -> Path:
    """A virtual dataset over ``"."``:``/hidden_link``, an external link to a local HDF5 file: HDF5 resolves a
    virtual dataset's source with its default link access, where layoutlab's external-link callback is not."""
    n = len(FILE_CANARY) * 4
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        f["hidden_link"] = h5py.ExternalLink(os.fspath(secret_h5), "/secret")
        layout = h5py.VirtualLayout(shape=(n,), dtype="u1")
        layout[:] = h5py.VirtualSource(".", "/hidden_link", shape=(n,))
        f.create_virtual_dataset("notes", layout, fillvalue=0)
    return path


def virtual_self_nested(path: Path, secret: Path) -> Path:
    """Two levels of ``"."`` virtual datasets over a dataset stored in a local file (transitive)."""
    n = len(FILE_CANARY) * 4
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        f.create_dataset("hidden/raw", shape=(n,), dtype="u1", external=[(os.fspath(secret), 0, n)])
        inner = h5py.VirtualLayout(shape=(n,), dtype="u1")
        inner[:] = h5py.VirtualSource(".", "/hidden/raw", shape=(n,))
        f.create_virtual_dataset("hidden/inner", inner, fillvalue=0)
        outer = h5py.VirtualLayout(shape=(n,), dtype="u1")
        outer[:] = h5py.VirtualSource(".", "/hidden/inner", shape=(n,))
        f.create_virtual_dataset("notes", outer, fillvalue=0)
    return path


def every_hostile_file(directory: Path, secrets: dict[str, Path]) -> dict[str, Path]:
    """One file per way of reaching outside, by name."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "external-environ": external_environ(directory / "external-environ.h5"),
        "external-environ-relative": external_environ(directory / "external-environ-relative.h5", relative=True),
        "external-environ-bad-fillvalue": external_environ(directory / "external-environ-fill.h5",
                                                           fill_value_attr="abc"),
        "external-local-file": external_local_file(directory / "external-local-file.h5", secrets["text"]),
        "virtual-local-file": virtual_local_file(directory / "virtual-local-file.h5", secrets["hdf5"]),
        "external-link-local-file": external_link_local_file(directory / "external-link.h5", secrets["hdf5"]),
        "virtual-self-external-environ": virtual_self_over_external(directory / "vds-self-environ.h5",
                                                                    "/proc/self/environ"),
        "virtual-self-external-file": virtual_self_over_external(directory / "vds-self-file.h5",
                                                                 os.fspath(secrets["text"]), len(FILE_CANARY) * 4),
        "virtual-self-external-link": virtual_self_over_external_link(directory / "vds-self-elink.h5",
                                                                      secrets["hdf5"]),
        "virtual-self-nested": virtual_self_nested(directory / "vds-self-nested.h5", secrets["text"]),
    }


def leaks(content: bytes) -> list[str]:
    """Which canaries ``content`` holds."""
    found = [marker.decode() for marker in ENVIRON_MARKERS if marker in content]
    if FILE_CANARY in content:
        found.append(FILE_CANARY.decode())
    return found


def leaks_under(root: Path) -> dict[str, list[str]]:
    """Every file under ``root`` that holds a canary, with the canaries it holds."""
    found = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file():
            hits = leaks(path.read_bytes())
            if hits:
                found[str(path.relative_to(root))] = hits
    return found


# --- files that are damaged on purpose (issue 36): each must be refused with its reason, never held in
# memory, never dropped silently.

MiB = 1 << 20


def deflate_bomb(path: Path, inflated: int = 512 * MiB) -> Path:
    """A valid file whose one deflate chunk, 120 bytes declared (30 float32), inflates to ``inflated`` bytes
    of zeros (~1/1000 of that stored); every other chunk and a second variable are sound."""
    import zlib

    with h5py.File(path, "w") as f:
        bomb = f.create_dataset("bomb", shape=(300,), dtype="f4", chunks=(30,), compression="gzip")
        bomb[:] = np.arange(300, dtype="f4")
        _with_plain_data(f)
        packer = zlib.compressobj(9)
        block = b"\0" * (16 * MiB)
        stream = b"".join(packer.compress(block) for _ in range(inflated // len(block))) + packer.flush()
        bomb.id.write_direct_chunk((30,), stream)
    return path


ABSENT_FILTER_ID = 32099  # registered by no one: a plugin the reader does not have


def absent_filter(path: Path) -> Path:
    """A valid file whose variable ``packed`` went through filter 32099, a plugin no reader here has (written
    with a pass-through stand-in registered for the duration), beside a plain variable."""
    from repack_helpers import stand_in_filter

    with stand_in_filter(ABSENT_FILTER_ID, b"absent-plugin"), h5py.File(path, "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((10,))
        dcpl.set_filter(ABSENT_FILTER_ID, h5py.h5z.FLAG_MANDATORY, ())
        space = h5py.h5s.create_simple((40,))
        packed = h5py.Dataset(h5py.h5d.create(f.id, b"packed", h5py.h5t.NATIVE_FLOAT, space, dcpl=dcpl))
        packed[:] = np.arange(40, dtype="f4")
        _with_plain_data(f)
    return path


def hard_link_cycle(path: Path) -> Path:
    """A valid file whose group ``a/b`` holds a hard link ``loop`` back to its ancestor ``a`` (and one to
    the root): a walk by path never ends, a walk by object sees each group once."""
    with h5py.File(path, "w") as f:
        _with_plain_data(f)
        b = f.create_group("a/b")
        b["x"] = np.arange(6, dtype="i4")
        b["loop"] = f["a"]
        b["root"] = f
    return path


def on_a_grid(path: Path, add) -> Path:
    """A small NetCDF-4 (time, lat, lon) grid (what the pipeline's grid variants take) with ``add(f)``'s
    hostile object added beside its variables."""
    import contextlib

    from layoutlab.samples import geos

    geos.write_geos(path, shape=(4, 19, 36))
    with getattr(add, "while_writing", contextlib.nullcontext)(), h5py.File(path, "a") as f:
        add(f)
    return path


def add_deflate_bomb(f, inflated: int = 64 * MiB) -> None:
    import zlib

    bomb = f.create_dataset("bomb", shape=(300,), dtype="f4", chunks=(30,), compression="gzip")
    bomb[:] = np.arange(300, dtype="f4")
    bomb.id.write_direct_chunk((30,), zlib.compress(b"\0" * inflated, 9))


def add_absent_filter(f) -> None:
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((10,))
    dcpl.set_filter(ABSENT_FILTER_ID, h5py.h5z.FLAG_MANDATORY, ())
    packed = h5py.Dataset(h5py.h5d.create(f.id, b"packed", h5py.h5t.NATIVE_FLOAT, h5py.h5s.create_simple((40,)),
                                          dcpl=dcpl))
    packed[:] = np.arange(40, dtype="f4")


def _stand_in():  # (registered while the file is open: HDF5 unregisters no filter an open dataset uses)
    from repack_helpers import stand_in_filter

    return stand_in_filter(ABSENT_FILTER_ID, b"absent-plugin")


add_absent_filter.while_writing = _stand_in


def add_hard_link_cycle(f) -> None:
    b = f.create_group("a/b")
    b["x"] = np.arange(6, dtype="i4")
    b["loop"] = f["a"]
