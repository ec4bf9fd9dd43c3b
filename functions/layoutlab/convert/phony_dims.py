"""The names h5netcdf (and so xarray) gives the axes of an HDF5 dataset without dimension scales.

HDF5 files written without netCDF's dimension scales (GPM DPR, ATL03's subgroups) have "phony" dimensions:
h5netcdf with ``phony_dims="sort"`` names them ``phony_dim_<n>``, numbered over the whole file, one per
distinct size in a group. A Zarr copy (rechunk_zarr) and the references over the file (virtual) name them
the same way, so that ``xr.open_datatree`` opens the copy as it opens the original: VirtualiZarr's own
``phony_dim_<axis>`` reuses one name for different lengths in a group and its parents, which xarray cannot
align (GPM DPR's ``/`` and ``/NS``).
"""

from __future__ import annotations

HDF5_READ_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError, AttributeError)


def phony_dimension_names(f, path: str, ds, phony: dict) -> tuple[str, ...]:
    """Every axis name of ``ds`` (at ``path`` in the open h5py file ``f``) as h5netcdf gives it; ``phony`` is a
    cache kept for the walk of one file (h5netcdf's view of it and a per-group index)."""
    group, _, name = path.rpartition("/")
    if "nc" not in phony:
        import h5netcdf

        try:
            phony["nc"] = h5netcdf.File(f, "r", phony_dims="sort")
        except HDF5_READ_ERRORS:
            phony["nc"] = None
    try:
        node = phony["nc"][group] if group else phony["nc"]
        if "DIMENSION_LIST" not in ds.attrs:  # every axis unlabeled: h5netcdf's naming, from a per-group index
            return group_phony_dimensions(node, group, name, ds.shape, phony)
        return tuple(node.variables[name].dimensions)
    except (*HDF5_READ_ERRORS, IndexError):
        # h5netcdf cannot open this file or group (an external or broken link, a committed
        # type it does not know): name them the same way, by size, per group, in our own count.
        seen: dict[int, int] = {}
        names = []
        for n in ds.shape:
            k = seen.get(n, 0)
            seen[n] = k + 1
            key = (group, n, k)
            if key not in phony:
                phony[key] = f"phony_dim_{sum(1 for x in phony if isinstance(x, tuple))}"
            names.append(phony[key])
        return tuple(names)


def group_phony_dimensions(node, group: str, name: str, shape, phony: dict) -> tuple[str, ...]:
    """The names h5netcdf gives the axes of a variable with no dimension scales (phony_dims="sort").

    h5netcdf's own lookup lists the group's dimensions of the axis's size for every axis of every
    variable, reading each dimension's size each time: quadratic in the group's dimensions (1,000
    datasets of 1,000 sizes took 9 s of a rechunk's plan). The same rule, from one index per group:
    the n-th axis of a size is the group's n-th dimension of that size, in the group's order; a
    variable named like a visible dimension is that dimension.
    """
    index = phony.setdefault("group_dimensions", {})
    if group not in index:
        by_size: dict[int, list[str]] = {}
        for dimension in node.dimensions.values():
            by_size.setdefault(dimension.size, []).append(dimension.name.split("/")[-1])
        visible, ancestor = set(), node
        while ancestor is not None:
            visible.update(ancestor.dimensions)
            ancestor = ancestor.parent if ancestor.parent is not ancestor else None
        index[group] = (by_size, visible)
    by_size, visible = index[group]
    if name in visible:
        return (name,)
    seen: dict[int, int] = {}
    names = []
    for n in shape:
        names.append(by_size[n][seen.get(n, 0)])
        seen[n] = seen.get(n, 0) + 1
    return tuple(names)
