"""What the plan step must know about a dataset: a grid or a granule, and its main array.

Read from the file itself (h5py over a local path or s3fs), touching metadata
only: a gridded dataset is one whose largest floating-point array is 3-D with
1-D coordinate scales (time, lat, lon in NetCDF terms); a granule is an
ICESat-2-like file with beam groups holding ``heights/h_ph``.
"""

from __future__ import annotations

from contextlib import contextmanager

from layoutlab.errors import BadInputFile
from layoutlab.pipeline.plan import DatasetFacts
from layoutlab.storage import is_s3_url, s3fs_filesystem

BEAM_NAMES = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")


@contextmanager
def _open(location: str):
    from layoutlab.hdf5_input import open_input

    if is_s3_url(location):
        fs = s3fs_filesystem(for_url=location)
        with fs.open(location, "rb", block_size=4 * 2**20, cache_type="blockcache") as stream:
            with open_input(stream, location) as f:
                yield f
    else:
        with open_input(location) as f:
            yield f


def _dimension_names(dataset) -> tuple[str, ...]:
    names = []
    for axis, dim in enumerate(dataset.dims):
        scales = list(dim.values()) if len(dim) else []
        names.append(scales[0].name.rsplit("/", 1)[-1] if scales else f"dim{axis}")
    return tuple(names)


def dataset_facts(location: str) -> DatasetFacts:
    import h5py

    from layoutlab.hdf5_input import data_outside_file

    try:
        with _open(location) as f:
            beams = [b for b in BEAM_NAMES if f.get(f"{b}/heights/h_ph") is not None]
            if beams:
                # the largest beam's declared sizes: what one case may read (pipeline/case_reads.py)
                heights = [d for d in (f.get(f"{b}/heights/h_ph") for b in beams) if isinstance(d, h5py.Dataset)]
                lats = [d for d in (f.get(f"{b}/heights/lat_ph") for b in beams) if isinstance(d, h5py.Dataset)]
                largest = max(heights, key=lambda d: d.nbytes, default=None)
                return DatasetFacts(kind="granule", beams=tuple(beams),
                                    beam_elements=int(largest.size) if largest is not None else 0,
                                    beam_bytes=int(largest.nbytes) if largest is not None else 0,
                                    beam_lat_bytes=max((int(d.nbytes) for d in lats), default=0))
            candidates = []

            def visit(name, obj):
                # (a variable whose values live outside the file is never the one measured: never read)
                if isinstance(obj, h5py.Dataset) and obj.ndim == 3 and obj.dtype.kind == "f" \
                        and data_outside_file(obj) is None:
                    candidates.append((obj.size, name, obj))

            f.visititems(visit)
            if not candidates:
                return DatasetFacts(kind="other")
            _, name, dataset = max(candidates, key=lambda c: c[0])
            return DatasetFacts(kind="grid", grid_shape=tuple(int(n) for n in dataset.shape),
                                dims=_dimension_names(dataset), itemsize=dataset.dtype.itemsize,
                                variable=name)
    except OSError as error:
        raise BadInputFile(location, f"cannot be read as HDF5: {str(error).splitlines()[0]}") from None
