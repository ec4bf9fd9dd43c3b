"""Which pattern families a file gets, on which variables, where: planned from its structure model.

Per role present (``structure.Unit``), the largest data variables (not coordinates, flags or bounds)
up to the plan's ``families.variables`` count; when a role's units hold no data variable at all
(OMPS's geolocation-only granule, SMAP's prefetch subset) its coordinates are read instead, and the
reason says so. Locations come from the file's own coordinates: the middle of the record axis, the
middle cell of the latitude / longitude axes, a box of a tenth of the coordinate spans around it
(the middle tenth), a row range of the middle tenth of a table's coordinate. A location on a fill
value moves to the nearest valid cell of a small window (read at plan time: at most
``WINDOW`` x ``WINDOW`` values of one record step). A family that cannot fit the file is not planned
(``skipped`` says why): never a failed case.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from layoutlab.structure import SMALL_COORDINATE_BYTES, Structure, Unit

DEFAULT_FAMILIES = ("open-list", "variable-read", "column-read", "record-slice", "point-series", "box",
                    "row-subset", "multi-variable")
DEFAULT_VARIABLES = 2
DEFAULT_ROLES = 2  # the roles holding the most data bytes (CfRadial: its fields, then its per-ray table)
WINDOW = 64  # cells each side searched for a valid value around a location on fill
MULTI_VARIABLES = 4  # variables a multi-variable case reads at most


@dataclass
class Planned:
    pattern: str
    params: dict
    role: str
    variable: str  # what the case reads, for people (one path, or several joined)
    why: str
    read_bytes: int  # uncompressed bytes the case reads at most, from the declared shapes

    def to_dict(self) -> dict:
        return {"pattern": self.pattern, "params": self.params, "role": self.role, "variable": self.variable,
                "why": self.why, "read_bytes": self.read_bytes}


@dataclass
class FamilyPlan:
    cases: list[Planned] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "family on role: why not"


def _valid(values: np.ndarray, fill: float | None) -> np.ndarray:
    values = np.asarray(values, dtype="f8")
    ok = np.isfinite(values)
    if fill is not None:
        ok &= values != fill
    return ok


def _off_fill(f, array, index: list, axes: tuple[int, int]) -> list:
    """``index`` moved, along ``axes``, to the nearest cell of a WINDOW-wide box holding a valid value
    (neither the fill value nor NaN), every other axis at its position in ``index`` (whole axes at 0)."""
    probe = [0 if entry is None else entry for entry in index]
    window = []
    for axis, position in enumerate(probe):
        if axis in axes:
            start = max(0, position - WINDOW)
            window.append(slice(start, min(array.shape[axis], position + WINDOW + 1)))
        else:
            window.append(position)
    values = np.asarray(f[array.path][tuple(window)], dtype="f8")
    ok = _valid(values, array.fill_value)
    if ok.size == 0 or not ok.any():
        return index
    starts = [window[a].start for a in axes]
    hits = np.argwhere(ok)
    centre = np.array([probe[a] - s for a, s in zip(axes, starts)])
    best = hits[np.argmin(((hits - centre) ** 2).sum(axis=1))]
    moved = list(index)
    for a, s, h in zip(axes, starts, best):
        moved[a] = int(s + h)
    return moved


def _coordinate_range(f, structure: Structure, path: str, quantiles: bool = False) -> tuple[float, float] | None:
    """(low, high) of the valid values of a coordinate: all of it when small, else its two ends; with
    ``quantiles`` (a small 1-D one) its 45th and 55th percentiles."""
    array = structure.arrays[path]
    if array.outside_file:
        return None
    data = f[path]
    if array.nbytes <= SMALL_COORDINATE_BYTES:
        values = np.asarray(data[...], dtype="f8").reshape(-1)
    else:
        values = np.asarray([data[(0,) * len(array.shape)], data[tuple(n - 1 for n in array.shape)]], dtype="f8")
    values = values[_valid(values, array.fill_value)]
    if np.dtype(array.dtype).kind == "f":  # (packed integers, GLM's event_lat, are compared raw, as stored)
        if array.axis == "Y":
            values = values[np.abs(values) <= 90]
        elif array.axis == "X":
            values = values[np.abs(values) <= 360]
    if values.size == 0:
        return None
    if quantiles and values.size == array.shape[0]:
        # the middle tenth of the rows' values (sparse rows: ATL06's 17 histograms): never an empty range
        low, high = np.quantile(values, [0.45, 0.55])
        return float(low), float(high)
    return float(values.min()), float(values.max())


def _nbytes(array, index) -> int:
    n = 1
    for entry, size in zip(index, array.shape):
        if entry is None:
            n *= size
        elif isinstance(entry, (list, tuple)):
            n *= entry[1] - entry[0]
    return n * array.itemsize


def _variables(structure: Structure, units: list[Unit], count: int) -> tuple[list[str], str]:
    # (ties broken by path: the same plan in every process, whatever the set's order)
    data = sorted({v for u in units for v in u.variables}, key=lambda p: (-structure.arrays[p].nbytes, p))
    if data:
        return data[:count], "largest data variables"
    coordinates = sorted({c for u in units for c in u.coordinates.values()
                          if len(structure.arrays[c].shape) >= 1 and structure.arrays[c].shape[0] > 1},
                         key=lambda p: (-structure.arrays[p].nbytes, p))
    return coordinates[:count], "no data variable over these coordinates: the coordinates themselves"


def plan_families(f, structure: Structure, families=DEFAULT_FAMILIES, count: int = DEFAULT_VARIABLES,
                  max_roles: int = DEFAULT_ROLES) -> FamilyPlan:
    """The family cases for the open file ``f`` of this ``structure``: per role (the ``max_roles`` holding
    the most data bytes), ``count`` variables."""
    out = FamilyPlan()
    wanted = [name for name in DEFAULT_FAMILIES if name in families]
    if "open-list" in wanted:
        out.cases.append(Planned("open-list", {}, structure.role, "(every object)", "open and list the file", 0))
    data_bytes: dict[str, int] = {}
    for unit in structure.units:
        if unit.role != "metadata-only":
            data_bytes[unit.role] = data_bytes.get(unit.role, 0) + (unit.nbytes if unit.variables else 0)
    roles = sorted(data_bytes, key=lambda r: (r != structure.role, -data_bytes[r]))
    for role in roles[max_roles:]:
        out.skipped.append(f"every family on {role}: beyond the plan's {max_roles} role(s) holding the most data")
    for role in roles[:max_roles]:
        units = [u for u in structure.units if u.role == role]
        variables, how = _variables(structure, units, count)
        if not variables:
            out.skipped.append(f"every family on {role}: no array of more than one value")
            continue
        unit = next((u for u in units if variables[0] in u.variables), units[0])  # the largest variable's
        planner = _table_cases if role in ("table", "timeseries") else _array_cases
        planner(f, structure, role, unit, variables, how, wanted, out)
    return out


def _add(out, wanted, pattern, role, why_not=None, **case):
    if pattern not in wanted:
        return
    if why_not:
        out.skipped.append(f"{pattern} on {role}: {why_not}")
        return
    out.cases.append(Planned(pattern=pattern, role=role, **case))


def _array_cases(f, structure, role, unit, variables, how, wanted, out) -> None:
    arrays = structure.arrays
    main = arrays[variables[0]]
    for path in variables:
        _add(out, wanted, "variable-read", role, params={"variable": path}, variable=path,
             why=f"{role} {unit.where or '/'}: {how}", read_bytes=arrays[path].nbytes)
    ndim = len(main.shape)
    record = unit.record_axis if unit.record_axis is not None and unit.record_axis < ndim else None
    lat, lon = unit.coordinates.get("Y"), unit.coordinates.get("X")
    # the geolocated axes of the main variable: from 1-D coordinates' dimensions, or 2-D geolocation's (first two)
    geo_axes = None
    if lat and lon and lat in arrays and lon in arrays:
        if len(arrays[lat].shape) == 1 and len(arrays[lon].shape) == 1:
            dims = main.dims
            if arrays[lat].dims[0] in dims and arrays[lon].dims[0] in dims:
                geo_axes = (dims.index(arrays[lat].dims[0]), dims.index(arrays[lon].dims[0]))
        elif len(arrays[lat].shape) == 2 and main.shape[:2] == arrays[lat].shape:
            geo_axes = (0, 1)
    # a location: the record axis whole, the middle of every other axis, moved off fill
    location = [None if a == record else n // 2 for a, n in enumerate(main.shape)]
    if ndim >= 2:
        middle_step = [n // 2 if a == record else entry for a, (entry, n) in enumerate(zip(location, main.shape))]
        move_axes = geo_axes or tuple(a for a in range(ndim) if a != record)[:2]
        if len(move_axes) == 2 and not main.outside_file:
            moved = _off_fill(f, main, middle_step, move_axes)
            location = [None if a == record else moved[a] for a in range(ndim)]
    if record is not None and ndim >= 2:
        index = [main.shape[record] // 2 if a == record else None for a in range(ndim)]
        _add(out, wanted, "record-slice", role, params={"variable": main.path, "index": index}, variable=main.path,
             why=f"one step of {main.dims[record]} (the middle one)", read_bytes=_nbytes(main, index))
    else:
        _add(out, wanted, "record-slice", role, "no record axis (time, scan line, ray)")
    if ndim >= 2:
        series_axis = record if record is not None else ndim - 1  # no record axis: the profile along the last
        index = [None if a == series_axis else (location[a] if location[a] is not None else n // 2)
                 for a, n in enumerate(main.shape)]
        _add(out, wanted, "point-series", role, params={"variable": main.path, "index": index}, variable=main.path,
             why=f"all of {main.dims[series_axis]} at one location ({index})", read_bytes=_nbytes(main, index))
    else:
        _add(out, wanted, "point-series", role, "a 1-D variable: its series is the variable-read")
    box = _box(f, structure, main, lat, lon, geo_axes, location)
    if isinstance(box, str):
        _add(out, wanted, "box", role, box)
    else:
        _add(out, wanted, "box", role, params=box, variable=main.path,
             why="a tenth of the latitude / longitude spans around the middle valid cell",
             read_bytes=main.nbytes + arrays[lat].nbytes + arrays[lon].nbytes)
    same = [v for v in unit.variables if arrays[v].shape == main.shape][:MULTI_VARIABLES]
    if len(same) >= 2 and ndim >= 1:
        index = [None if a == record else (location[a] if location[a] is not None else n // 2)
                 for a, n in enumerate(main.shape)]
        _add(out, wanted, "multi-variable", role, params={"variables": same, "index": index},
             variable=", ".join(same), why=f"{len(same)} variables at one location",
             read_bytes=sum(_nbytes(arrays[v], index) for v in same))
    else:
        _add(out, wanted, "multi-variable", role, f"one variable of shape {main.shape} only")
    _add(out, wanted, "column-read", role, "not a table")
    _add(out, wanted, "row-subset", role, "not a table")


def _box(f, structure, main, lat, lon, geo_axes, location) -> dict | str:
    arrays = structure.arrays
    if not geo_axes:
        return "no latitude / longitude over the variable's axes"
    for path in (lat, lon):
        if arrays[path].nbytes > SMALL_COORDINATE_BYTES or arrays[path].outside_file:
            return f"{path} is too large to read inside a case ({arrays[path].nbytes:,} bytes)"
    centre = [location[a] if location[a] is not None else main.shape[a] // 2 for a in geo_axes]
    lat_values, lon_values = f[lat], f[lon]
    if len(arrays[lat].shape) == 2:
        c_lat, c_lon = float(lat_values[centre[0], centre[1]]), float(lon_values[centre[0], centre[1]])
    else:
        c_lat, c_lon = float(lat_values[centre[0]]), float(lon_values[centre[1]])
    ranges = _coordinate_range(f, structure, lat), _coordinate_range(f, structure, lon)
    if None in ranges or not (math.isfinite(c_lat) and math.isfinite(c_lon)):
        return "latitude / longitude hold no valid value at the middle"
    (la0, la1), (lo0, lo1) = ranges
    half_lat, half_lon = max((la1 - la0) / 20, 1e-6), max((lo1 - lo0) / 20, 1e-6)
    return {"variable": main.path, "lat": lat, "lon": lon, "lat_axis": geo_axes[0], "lon_axis": geo_axes[1],
            "lat_min": c_lat - half_lat, "lat_max": c_lat + half_lat,
            "lon_min": c_lon - half_lon, "lon_max": c_lon + half_lon}


def _table_cases(f, structure, role, unit, variables, how, wanted, out) -> None:
    arrays = structure.arrays
    for path in variables:
        _add(out, wanted, "column-read", role, params={"variable": path}, variable=path,
             why=f"{role} {unit.where or '/'} ({unit.shape[0]} rows): {how}", read_bytes=arrays[path].nbytes)
    columns = [v for v in unit.variables if arrays[v].shape[0] == unit.shape[0]][:MULTI_VARIABLES] or variables[:1]
    rows = unit.shape[0]
    coordinate = unit.coordinates.get("Y") or unit.coordinates.get("T")
    span = (_coordinate_range(f, structure, coordinate, quantiles=True)
            if coordinate and arrays[coordinate].shape == (rows,) else None)
    if span:
        low, high = span
        if arrays[coordinate].nbytes > SMALL_COORDINATE_BYTES:  # only its ends were read: the middle tenth
            low, high = span[0] + 0.45 * (span[1] - span[0]), span[0] + 0.55 * (span[1] - span[0])
        _add(out, wanted, "row-subset", role,
             params={"variables": columns, "coordinate": coordinate, "low": low, "high": high},
             variable=", ".join(columns), why=f"the middle tenth of {coordinate}'s range",
             read_bytes=arrays[coordinate].nbytes + sum(arrays[c].nbytes for c in columns))
    else:
        _add(out, wanted, "row-subset", role, "no latitude or time coordinate along the rows with valid values")
    # what a lookup of one row reads: its data columns and its position (latitude, longitude, time)
    flat = [c for c in unit.variables if len(arrays[c].shape) == 1][:MULTI_VARIABLES]
    flat += [c for a, c in unit.coordinates.items() if a in ("Y", "X", "T") and arrays[c].shape == (rows,)
             and c not in flat][:max(0, MULTI_VARIABLES - len(flat))]
    if len(flat) >= 2:
        row = rows // 2 if arrays[flat[0]].outside_file else _off_fill_1d(f, arrays[flat[0]], rows // 2)
        _add(out, wanted, "multi-variable", role, params={"variables": flat, "index": [row]},
             variable=", ".join(flat), why=f"{len(flat)} columns at one row ({row}, off fill)",
             read_bytes=sum(arrays[c].itemsize for c in flat))
    else:
        _add(out, wanted, "multi-variable", role, "fewer than two 1-D data columns")
    for family in ("variable-read", "record-slice", "point-series", "box"):
        _add(out, wanted, family, role, "a table: its columns are read by column-read / row-subset")


def _off_fill_1d(f, array, row: int) -> int:
    start = max(0, row - WINDOW)
    values = np.asarray(f[array.path][start:row + WINDOW + 1], dtype="f8")
    ok = np.nonzero(_valid(values, array.fill_value))[0]
    if ok.size == 0:
        return row
    return int(start + ok[np.argmin(np.abs(ok - (row - start)))])
