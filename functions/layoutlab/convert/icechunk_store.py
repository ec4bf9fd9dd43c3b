"""Native Icechunk variants: the grid rechunked like a ``rechunk-zarr`` variant, in an Icechunk repository.

``convert/rechunk_zarr.py`` writes through zarr stores it opens from a URL and has no
Icechunk store option (that module belongs to the rechunk work; this one only calls
zarr), so this writes the (time, lat, lon) variables itself: each gridded variable in
blocks of whole shards (or chunks) along time, bounded by ``max_mem``; every other
variable (coordinates, small arrays) as one chunk. One commit at the end: the branch
``main`` shows the whole variant or nothing, so it is published atomically.
"""

from __future__ import annotations

import os

import numpy as np

from layoutlab import settings
from layoutlab.convert.virtual import _attrs, icechunk_storage


def _xarray_attrs(obj) -> dict:
    """The attributes, _FillValue encoded as xarray writes it to Zarr v3 (a number's FillValueCoder form): else
    ``xr.open_zarr`` of the repository refuses the variable (xarray decodes only its own _FillValue form)."""
    from layoutlab.convert.rechunk_zarr import CORE_KINDS, _json_attrs

    attrs = _attrs(obj)
    if "_FillValue" in attrs and obj.dtype.kind in CORE_KINDS:
        attrs.update(_json_attrs({"_FillValue": obj.attrs["_FillValue"]}, obj.dtype))
    return attrs


def _dimension_names(dataset) -> list[str] | None:
    try:
        names = []
        for dim in dataset.dims:
            if not len(dim):
                return None
            names.append(dim[0].name.rpartition("/")[2])
        return names
    except (RuntimeError, KeyError, TypeError):
        return None


def _layout(obj, chunks: dict, shards: dict | None):
    """(chunk shape, shard shape, dimension names) the variant stores the dataset ``obj`` in."""
    dims = _dimension_names(obj)
    if dims is None and obj.ndim:  # no dimension scales: named by length (xr.open_zarr needs every array's names,
        # and one name has one length in a group)
        return _layout_of(obj, chunks, shards, [f"dim_{n}" for n in obj.shape], scaled=False)
    return _layout_of(obj, chunks, shards, dims, scaled=dims is not None)


def _layout_of(obj, chunks: dict, shards: dict | None, dims, scaled: bool):
    if obj.ndim == 3 and scaled and len(chunks) == 3:  # the grid: rechunked as the plan says
        chunk_shape = tuple(min(int(c), n) for c, n in zip(chunks.values(), obj.shape))
        return chunk_shape, (tuple(int(s) for s in shards.values()) if shards else None), dims
    return (obj.shape or None), None, dims


def _writable(obj) -> bool:
    import h5py

    return isinstance(obj, h5py.Dataset) and obj.dtype.kind not in "OV" and not obj.dtype.names


def _check_output(f, chunks: dict, shards: dict | None, ceilings, local_path: str) -> None:
    """Refuse, before the repository exists, a file whose declared shapes would exceed ``ceilings``."""
    from layoutlab.convert import rechunk_plan as planner
    from layoutlab.errors import BadInputFile
    from layoutlab.hdf5_input import data_outside_file

    tally = planner.output_tally(ceilings or settings.value(settings.CEILINGS), os.path.getsize(local_path))
    found = []
    f.visititems(lambda name, obj: found.append((name, obj))
                 if _writable(obj) and data_outside_file(obj) is None else None)
    for name, obj in found:
        chunk_shape, shard_shape, _ = _layout(obj, chunks, shards)
        try:
            tally.add(planner.ArraySpec(name=name, shape=tuple(obj.shape), itemsize=obj.dtype.itemsize,
                                        source_chunks=tuple(max(1, n) for n in obj.shape),
                                        target_chunks=tuple(max(1, c) for c in (chunk_shape or ())),
                                        target_shards=shard_shape))
        except planner.PlanError as error:  # over a ceiling (OutputTooLarge), or shards that cannot be written
            raise BadInputFile(local_path, str(error)) from None


def write_icechunk_native(local_path: str, target_url: str, chunks: dict, shards: dict | None = None,
                          max_mem: int = 256 * 2**20, ceilings=None) -> dict:
    """Write the NetCDF-4/HDF5 grid at ``local_path`` to a new Icechunk repository at ``target_url``.

    ``ceilings`` (``layoutlab.ceilings.Ceilings``; ``LAYOUTLAB_CEILINGS`` or the defaults when None) bound
    the objects and declared bytes written: a file over them is refused before the repository is created."""
    import h5py
    import icechunk
    import zarr

    from layoutlab.bounded_decoding import within
    from layoutlab.convert.repack_hdf5 import missing_filters
    from layoutlab.errors import DAMAGED_HDF5_ERRORS, BadInputFile, damaged_reason, raised_by_h5py
    from layoutlab.hdf5_input import data_outside_file, open_input

    with open_input(local_path) as f:
        _check_output(f, chunks, shards, ceilings, local_path)
    repo = icechunk.Repository.create(icechunk_storage(target_url))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    written = {"arrays": 0, "bytes": 0, "skipped": []}
    with open_input(local_path) as f:
        root.attrs.update(_attrs(f))

        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                root.require_group(name).attrs.update(_attrs(obj))
                return
            if not isinstance(obj, h5py.Dataset):  # (a named datatype: no variable)
                return
            if not _writable(obj):  # (said in the record: a variant never lacks a variable silently)
                written["skipped"].append({"variable": name, "reason": f"data type {obj.dtype} is not written "
                                           "to a native Icechunk variant (numbers and booleans only)"})
                return
            outside = data_outside_file(obj)
            if outside is not None:
                written["skipped"].append({"variable": name, "reason": outside})
                return
            absent = missing_filters(obj)
            if absent:  # (its values cannot be decoded here: the variant fails naming it, never lacks it)
                raise BadInputFile(local_path, f"variable {name} cannot be converted: its filter plugin is absent "
                                               f"here ({', '.join(absent)}), so its values cannot be decoded")
            chunk_shape, shard_shape, dims = _layout(obj, chunks, shards)
            fill = obj.fillvalue if obj.dtype.kind in "biuf" else None
            array = root.create_array(name, shape=obj.shape, dtype=obj.dtype, chunks=chunk_shape,
                                      shards=shard_shape, fill_value=fill, attributes=_xarray_attrs(obj),
                                      dimension_names=dims)
            try:
                with within(obj):  # (a chunk that inflates past its declared size is refused, not held)
                    if not obj.shape:
                        array[...] = obj[()]
                    else:
                        step = (shard_shape or chunk_shape or obj.shape)[0]
                        row_bytes = max(1, int(np.prod(obj.shape[1:], dtype="i8")) * obj.dtype.itemsize)
                        block = max(step, (max_mem // 2 // row_bytes) // step * step)
                        for start in range(0, obj.shape[0], block):
                            array[start:start + block] = obj[start:start + block]
            except DAMAGED_HDF5_ERRORS as error:
                if not raised_by_h5py(error):
                    raise
                raise BadInputFile(local_path, f"variable {name} cannot be converted: its values cannot be read "
                                               f"({damaged_reason(error)})") from None
            written["arrays"] += 1
            written["bytes"] += obj.size * obj.dtype.itemsize

        f.visititems(visit)
    written["snapshot"] = session.commit("layoutlab: native Icechunk variant")
    written.update(chunks=chunks, shards=shards)
    return written
