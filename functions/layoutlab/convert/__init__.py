"""Producers of cloud-optimized variants: paged HDF5 repack, Zarr v3 rechunk."""
