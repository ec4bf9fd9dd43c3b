"""What the plan step must know about a dataset: a sample's shape, or any file's structure.

Read from the file itself (h5py over a local path or s3fs), touching metadata and small coordinate
arrays only. Two shapes keep today's named patterns (the presets of the published comparisons,
``bench/patterns.py``): a grid whose largest floating-point array is 3-D (time, lat, lon) with 1-D
``lat`` / ``lon`` coordinates covering the presets' Seattle point and Ohio box, and an
ICESat-2-like granule with beam groups holding ``heights/h_ph``. Any other file gets the pattern
families of ``bench/families.py``, planned from its structure model (``layoutlab/structure.py``,
``pipeline/families.py``).
"""

from __future__ import annotations

from layoutlab.errors import BadInputFile
from layoutlab.pipeline.plan import DatasetFacts
from layoutlab.structure import open_location_stream

BEAM_NAMES = ("gt1l", "gt1r", "gt2l", "gt2r", "gt3l", "gt3r")


# (the one way the plan step opens an upload: structure.open_location_stream)
_open = open_location_stream


def _dimension_names(dataset) -> tuple[str, ...]:
    names = []
    for axis, dim in enumerate(dataset.dims):
        scales = list(dim.values()) if len(dim) else []
        names.append(scales[0].name.rsplit("/", 1)[-1] if scales else f"dim{axis}")
    return tuple(names)


def _presets_fit(f, dataset) -> bool:
    """True when the grid presets (bench/patterns.py: lat / lon named so, Seattle point, Ohio box) fit this
    3-D array: its last two axes are as long as 1-D ``lat`` and ``lon`` whose ranges hold them."""
    import h5py
    import numpy as np

    from layoutlab.bench.patterns import TimeseriesPoint, TimeseriesRegionMean

    lat, lon = f.get("lat"), f.get("lon")
    if not (isinstance(lat, h5py.Dataset) and isinstance(lon, h5py.Dataset) and lat.ndim == 1 and lon.ndim == 1
            and dataset.shape[1:] == (lat.shape[0], lon.shape[0])):
        return False
    lat_values, lon_values = np.asarray(lat[...], dtype="f8"), np.asarray(lon[...], dtype="f8")
    point, box = TimeseriesPoint.defaults, TimeseriesRegionMean.defaults
    return bool(lat_values.min() <= min(point["lat"], box["lat_min"]) and lat_values.max() >= max(point["lat"], box["lat_max"])
                and lon_values.min() <= min(point["lon"], box["lon_min"]) and lon_values.max() >= max(point["lon"], box["lon_max"]))


def dataset_facts(location: str, plan: dict | None = None, counter=None) -> DatasetFacts:
    """The facts of the file at ``location``; for any other file than the presets' shapes, the family cases
    ``plan`` asks for (``families``: patterns, variables, roles; the default plan's when None). When the plan
    reads HDF5 with h5coro, whether h5coro reads what its cases read (``reader_refusals``). ``counter`` (a
    ``bench.accounting.RequestCounter``) counts the S3 requests and bytes of it all (the plan step's ``plan_io``)."""
    import dataclasses

    try:
        with _open(location, counter) as (f, read):
            facts = _facts(f, location, plan)
            refusal = _h5coro_refusal(f, read, facts, plan)
            return dataclasses.replace(facts, reader_refusals=(("h5coro", refusal),)) if refusal else facts
    except OSError as error:
        raise BadInputFile(location, f"cannot be read as HDF5: {str(error).splitlines()[0]}") from None


def _h5coro_refusal(f, read, facts: DatasetFacts, plan: dict | None) -> str | None:
    """Why h5coro cannot read the datasets this file's cases read (None: it can, or the plan reads no HDF5
    with h5coro): h5coro parses their metadata through the plan step's own stream."""
    import h5py

    from layoutlab.bench.readers import h5coro_refusal
    from layoutlab.pipeline import plan as plans

    if "h5coro" not in plans._for_kind((plan or plans.default_plan()).get("readers", {}), "hdf5"):
        return None
    if facts.kind == "granule":
        beam = facts.beams[0]
        paths = [f"{beam}/heights/h_ph", f"{beam}/heights/lat_ph"]
    elif facts.kind == "grid":
        paths = [facts.variable, "lat", "lon"]
    else:
        named = [c.get("variable") for c in facts.family_cases]
        named += [v for c in facts.family_cases for v in (c.get("params") or {}).values() if isinstance(v, str)]
        paths = list(dict.fromkeys(p for p in named if p))
    paths = [p for p in paths if isinstance(f.get(p), h5py.Dataset)]
    return h5coro_refusal(read, paths)


def _facts(f, location: str, plan: dict | None) -> DatasetFacts:
    import h5py

    from layoutlab.hdf5_input import data_outside_file

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
    if candidates:
        _, name, dataset = max(candidates, key=lambda c: c[0])
        grid = dict(grid_shape=tuple(int(n) for n in dataset.shape), dims=_dimension_names(dataset),
                    itemsize=dataset.dtype.itemsize, variable=name)
        if _presets_fit(f, dataset):
            return DatasetFacts(kind="grid", **grid)
        return structure_facts(f, location, plan, grid)
    return structure_facts(f, location, plan)


def structure_facts(f, location: str, plan: dict | None = None, grid: dict | None = None) -> DatasetFacts:
    """Facts of a file of any structure: its role and the family cases planned for it (kind ``other`` and
    no cases when it holds no numeric array to read; ``structure.describe`` says what it holds)."""
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.families import plan_families
    from layoutlab.structure import read_structure

    structure = read_structure(f, location)
    families, variables, roles = plans.family_settings(plan or plans.default_plan())
    planned = plan_families(f, structure, families, variables, roles)
    readable = [c for c in planned.cases if c.pattern != "open-list"]
    model = structure.to_dict()
    # (bounded for the run's record: a unit's first variables, the first units)
    units = [{**u, "variables": u["variables"][:8], "variable_count": len(u["variables"])} for u in model["units"][:20]]
    record = {"role": structure.role, "units": units, "unit_count": len(model["units"]), "arrays": len(model["arrays"]),
              "non_numeric_datasets": structure.non_numeric, "groups": structure.groups}
    if not readable:
        reason = (structure.describe() if structure.role == "metadata-only"
                  else "no pattern family fits it: " + "; ".join(planned.skipped[:3]))
        return DatasetFacts(kind="other", role=structure.role, structure={**record, "why_not": reason},
                            family_skipped=tuple(planned.skipped))
    # (kind "structure", never a role's name: a grid of any shape is not the grid the presets and the
    # grid-only variants are for)
    # A grid keeps the plan's grid layouts (variants ``applies_to: grid``: Nguyen's time-series / map / balanced
    # chunk shapes over its own axes, kinds/_grid.py), whatever its coordinates hold: the presets' patterns
    # need Seattle and Ohio, the layouts only the shape. A table gets its row layouts, a swath its scan lines'.
    layout_facts = (_grid_facts(structure, grid) if structure.role == "grid" else
                    _record_facts(structure) if structure.role in ("table", "swath") else {})
    return DatasetFacts(kind="structure", role=structure.role, structure=record, **layout_facts,
                        family_cases=tuple(c.to_dict() for c in planned.cases),
                        family_skipped=tuple(planned.skipped))


def _zarr_dimension(name: str) -> str | None:
    """A structure model's dimension (a dimension scale's path) as the Zarr copy names it (its base name); None
    for a phony dimension (no scale: the copy names it by h5netcdf's count, not known here)."""
    base = name.rpartition("/")[2]
    return None if base.startswith("phony_dim_") else base


def _grid_facts(structure, grid: dict | None) -> dict:
    """The grid's largest unit with data: its shape, its axes' names and kinds (T, Z, Y, X) from its coordinates,
    its largest variable; else the largest 3-D float array found first (``grid``), as (time, lat, lon)."""
    units = [u for u in structure.units if u.role == "grid" and u.variables and len(u.shape) >= 2]
    if units:
        unit = max(units, key=lambda u: u.nbytes)
        dims = tuple(_zarr_dimension(d) for d in unit.dims)
        if None not in dims:
            axis_of = {}
            for axis, path in unit.coordinates.items():
                coordinate = structure.arrays.get(path)
                if coordinate is not None and len(coordinate.shape) == 1:
                    axis_of[coordinate.dims[0]] = axis
            main = structure.arrays[unit.variables[0]]
            return dict(grid_shape=tuple(unit.shape), dims=dims, grid_axes=tuple(axis_of.get(d) for d in unit.dims),
                        itemsize=main.itemsize, variable=main.path)
    return grid or {}


def _record_facts(structure) -> dict:
    """A table's or a swath's record axis: the longest table's rows, or the largest swath's scan lines and the
    bytes of one scan line of its largest variable; and every numeric array's first-axis length."""
    arrays = tuple((a.shape[0], a.nbytes // a.itemsize // max(1, a.shape[0])) for a in structure.arrays.values()
                   if a.shape and a.shape[0] > 1 and not a.outside_file)
    units = [u for u in structure.units if u.role == structure.role]
    if structure.role == "table":
        return dict(record_length=max(u.shape[0] for u in units), record_arrays=arrays)
    with_data = [u for u in units if u.variables] or units
    unit = max(with_data, key=lambda u: u.nbytes)
    largest = structure.arrays[unit.variables[0]] if unit.variables else \
        structure.arrays[unit.coordinates.get("Y") or next(iter(unit.coordinates.values()))]
    return dict(record_length=unit.shape[0], record_bytes=largest.nbytes // max(1, largest.shape[0]),
                record_arrays=arrays)
