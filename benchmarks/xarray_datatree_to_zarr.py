"""The rival of `layoutlab rechunk` for a whole granule, as an xarray user converts one: every group of the file
opened with dask (one dask chunk per stored HDF5 chunk), written to a Zarr v3 store, dask's synchronous scheduler
(one core, as layoutlab's rechunk runs).

    python benchmarks/xarray_datatree_to_zarr.py GRANULE.h5 OUT.zarr

Timed against `layoutlab rechunk GRANULE.h5 OUT.zarr` with `farm-bench --vs` (docs/benchmarks.md, "Rechunk of a
file of many small variables").
"""

import shutil
import sys

import dask
import xarray as xr


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    source, destination = argv
    dask.config.set(scheduler="synchronous")
    shutil.rmtree(destination, ignore_errors=True)
    tree = xr.open_datatree(source, engine="h5netcdf", phony_dims="access", chunks={})
    tree.to_zarr(destination, zarr_format=3, consolidated=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
