"""What a file holds, by structure, read from its metadata: the model the plan step fits patterns to.

Every numeric array with its dimensions (netCDF-4 dimension scales through ``DIMENSION_LIST``; an
array without them gets phony dimensions, one per size and group, as h5netcdf's ``phony_dims="sort"``
names them), its coordinates found as the CF conventions say (``axis``, ``standard_name``, time
``units`` "… since …", the ``coordinates`` attribute, ``bounds``; 2-D latitude / longitude of a swath),
and *units*: the arrays that are read together, each with one role:

- ``grid``: arrays over 1-D latitude and longitude coordinates, or 2-D ones whose rows each hold one
  latitude (a projected grid: SMAP's EASE grid), with or without time and levels;
- ``swath``: arrays over 2-D latitude / longitude that vary along both axes (scan x pixel: TEMPO,
  OMPS, GPM DPR);
- ``table``: parallel 1-D arrays (and arrays whose first dimension is the row) sharing one row
  dimension in one group (ICESat-2 beams, GEDI ``BEAMxxxx``, GOES GLM events / groups / flashes);
- ``timeseries``: a table whose rows are times at one place (an ARM station);
- ``radar``: an ODIM_H5 volume (``datasetN/dataN/data``) or CfRadial (rays x gates);
- ``nd``: other arrays of two or more dimensions; ``metadata-only``: nothing numeric beyond scalars.

Plain h5py, walking by object address (``hdf5_input.iter_objects``: a hard-link cycle is walked once).
Values read: none, except the ends and three rows of small coordinate arrays (to tell a projected
grid from a swath, a station from a track); an array whose values live outside the file
(``hdf5_input.data_outside_file``) is listed, never read, never chosen.

Why plain h5py, not cf_xarray over ``xarray.open_datatree(engine="h5netcdf", phony_dims="access")``:
measured through a counting file object (reads / bytes of the metadata pass; cf_xarray is not in the
environment, so the datatree figure is a lower bound for it), the datatree reads fewer raw bytes
(ATL06 2,097 reads / 1.5 MB vs 2,493 / 2.1 MB here; GEDI L2B 1,785 / 0.87 MB vs 3,493 / 3.7 MB;
ERA5 58 / 23 kB vs 65 / 22 kB), most of the difference being ``hdf5_input.iter_objects``' object-address
look-ups (the cycle-safe walk) and the three latitude rows read to tell a projected grid from a swath
(TEMPO: 0.95 MB of chunks). Through the plan step's s3fs block cache (4 MiB blocks) those repeated reads
are not repeated requests. What decided it: the datatree gives no roles (tables, swaths, radar
volumes are this module's own rules either way), refuses files h5netcdf cannot map (ATL03's scales
mixed with phony dimensions, docs/bench-and-readers.md), and decodes coordinates' values.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

ROLES = ("grid", "swath", "table", "timeseries", "radar", "nd", "metadata-only")
# arrays larger than this are never read to classify coordinates (only their ends)
SMALL_COORDINATE_BYTES = 8 * 2**20

_LAT_UNITS = re.compile(r"^degrees?_?n(orth)?$", re.I)
_LON_UNITS = re.compile(r"^degrees?_?e(ast)?$", re.I)
_LAT_NAME = re.compile(r"^(lat|latitude)$|^lat_|_lat$|^latitude_|_latitude$", re.I)
_LON_NAME = re.compile(r"^(lon|long|longitude)$|^lon_|_lon$|^longitude_|_longitude$", re.I)
_TIME_NAME = re.compile(r"^(time|delta_time|t)$", re.I)
_Z_NAME = re.compile(r"^(lev|level|levels|plev|pressure_level|height|altitude|depth|z)$", re.I)
_FLAG_NAME = re.compile(r"flag|^qc_|_qc$|quality|_mask$|^mask", re.I)


_ATTRIBUTES_READ = frozenset(("axis", "standard_name", "units", "CLASS", "coordinates", "bounds", "climatology",
                              "_FillValue", "positive", "flag_values", "flag_masks", "flag_meanings"))


def _text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if hasattr(value, "shape") and getattr(value, "size", 0) == 1:  # ODIM's one-element string arrays
        return _text(value.reshape(-1)[0])
    return str(value) if value is not None else ""


@dataclass
class Array:
    """One numeric array: where it is, its shape and dimensions, and what CF says it is."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    dims: tuple[str, ...]
    nbytes: int
    is_coordinate: bool = False
    axis: str | None = None  # "T", "Z", "Y" (latitude), "X" (longitude) when a coordinate of that kind
    is_flag: bool = False
    is_bounds: bool = False
    fill_value: float | None = None
    outside_file: str | None = None
    coordinates: dict[str, str] = field(default_factory=dict)  # axis -> path of its coordinate array

    @property
    def group(self) -> str:
        return self.path.rpartition("/")[0]

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]

    @property
    def is_data(self) -> bool:
        # (an array with an axis is a coordinate even when no attribute says so: GEDI's delta_time)
        return not (self.is_coordinate or self.axis or self.is_flag or self.is_bounds or self.outside_file)


@dataclass
class Unit:
    """Arrays read together, with one role: a grid, a swath, a table (one group's rows), ..."""

    role: str
    where: str  # the group (or the row dimension's group) that holds it
    dims: tuple[str, ...]  # the dimensions the role is about (record / rows first)
    shape: tuple[int, ...]
    variables: list[str]  # data arrays, largest first
    coordinates: dict[str, str]  # axis (T, Z, Y, X) -> coordinate path
    record_axis: int | None = None  # the axis a record-slice takes one step of (time, scan line, ray, row)
    nbytes: int = 0
    why: str = ""


@dataclass
class Structure:
    """The file's arrays and units; ``role`` is the role of the unit holding the most data bytes."""

    file: str
    role: str
    arrays: dict[str, Array]
    units: list[Unit]
    conventions: str = ""
    groups: int = 0
    non_numeric: int = 0  # datasets of strings, compounds, references: listed, never planned

    def unit_of(self, role: str) -> Unit | None:
        return next((u for u in self.units if u.role == role), None)

    def to_dict(self) -> dict:
        """JSON-able: what goes into the run's record and ``layoutlab inspect --json``."""
        return {"file": self.file, "role": self.role, "conventions": self.conventions, "groups": self.groups,
                "non_numeric_datasets": self.non_numeric,
                "arrays": [{**{k: v for k, v in asdict(a).items() if v not in (None, False, {}, "")},
                            "shape": list(a.shape), "dims": list(a.dims)} for a in self.arrays.values()],
                "units": [{**asdict(u), "dims": list(u.dims), "shape": list(u.shape)} for u in self.units]}

    def summary_lines(self) -> list[str]:
        numeric = len(self.arrays)
        lines = [f"structure: {self.role} ({numeric} numeric arrays, {self.non_numeric} other datasets, "
                 f"{self.groups} groups{'; ' + self.conventions if self.conventions else ''})"]
        for unit in self.units[:12]:
            shape = "x".join(map(str, unit.shape))
            coords = ", ".join(f"{k}={v}" for k, v in unit.coordinates.items())
            shown = ", ".join(unit.variables[:4]) + (f" and {len(unit.variables) - 4} more" if len(unit.variables) > 4 else "")
            lines.append(f"  {unit.role:<10} {unit.where or '/'} ({', '.join(unit.dims)}: {shape}) "
                         f"{unit.why}; data: {shown or 'none'}" + (f"; coordinates: {coords}" if coords else ""))
        if len(self.units) > 12:
            lines.append(f"  ... and {len(self.units) - 12} more units")
        return lines

    def describe(self) -> str:
        """One line saying what a file without numeric arrays holds."""
        def count(n, noun):
            return f"{n} {noun}{'' if n == 1 else 's'}"

        numeric = f"{count(len(self.arrays), 'numeric array')} of one value or none, " if self.arrays else ""
        return (f"holds no numeric array to read ({numeric}{count(self.non_numeric, 'dataset')} of strings, "
                f"compounds or references, {count(self.groups, 'group')}): layoutlab has no access pattern for it")


# --- reading ----------------------------------------------------------------------------------------

def _classify(array: Array, attrs) -> None:
    """Set ``axis`` / ``is_coordinate`` / ``is_flag`` from the array's own attributes and name."""
    axis = _text(attrs.get("axis")).upper()
    standard = _text(attrs.get("standard_name")).lower()
    units = _text(attrs.get("units")).strip()
    name = array.name
    if _text(attrs.get("CLASS")) == "DIMENSION_SCALE":
        array.is_coordinate = True
    if axis == "T" or standard == "time" or (" since " in f" {units.lower()} " and len(array.shape) <= 1) \
            or (_TIME_NAME.match(name) and len(array.shape) <= 1):
        array.axis = "T"
    elif standard == "latitude" or axis == "Y" and _LAT_UNITS.match(units) or _LAT_UNITS.match(units) \
            or (_LAT_NAME.search(name) and units.lower().startswith("degree")) or name.lower() in ("lat", "latitude"):
        array.axis = "Y"
    elif standard == "longitude" or _LON_UNITS.match(units) \
            or (_LON_NAME.search(name) and units.lower().startswith("degree")) or name.lower() in ("lon", "longitude"):
        array.axis = "X"
    elif axis == "Z" or standard in ("altitude", "height", "air_pressure", "depth") or "positive" in attrs \
            or (_Z_NAME.match(name) and len(array.shape) == 1 and array.is_coordinate):  # (a track's "height" is data)
        array.axis = "Z"
    if array.axis in ("Y", "X") or (array.axis in ("T", "Z") and array.is_coordinate):
        array.is_coordinate = True
    if any(k in attrs for k in ("flag_values", "flag_masks", "flag_meanings")) or _FLAG_NAME.search(name) \
            or standard.endswith("status_flag"):
        array.is_flag = not array.is_coordinate


def _dimension_names(dataset, group: str, path_at: dict) -> tuple[str, ...]:
    """Each axis's dimension scale by its path (looked up by object address in ``path_at``: h5py's ``.name``
    of a dereferenced scale asks HDF5 to search the file for a path, 7 ms each on the ATL03 sample), else
    a phony dimension named by group and size."""
    import h5py

    names = []
    for axis, size in enumerate(dataset.shape):
        scale = None
        try:
            dim = dataset.dims[axis]
            if len(dim):
                scale = path_at.get(h5py.h5o.get_info(dim[0].id).addr)
        except (OSError, KeyError, ValueError, RuntimeError, TypeError):  # a damaged or dangling reference
            scale = None
        names.append(scale or f"{group}/phony_dim_{size}".lstrip("/"))
    return tuple(names)


def read_structure(f, location: str) -> Structure:
    """The structure of the open h5py file ``f`` (``location`` names it in the model and in errors)."""
    import h5py
    import numpy as np

    from layoutlab.hdf5_input import data_outside_file, iter_objects

    arrays: dict[str, Array] = {}
    attrs_of: dict[str, dict] = {}
    groups = non_numeric = 0
    objects = list(iter_objects(f))
    # dimension scales by object address: the only objects a DIMENSION_LIST can name (an object's address costs
    # a read of its header: 3.2 MB of GEDI's 3.7 MB file when asked of every dataset)
    path_at = {}
    for path, obj in objects:
        try:
            if isinstance(obj, h5py.Dataset) and "CLASS" in obj.attrs and _text(obj.attrs["CLASS"]) == "DIMENSION_SCALE":
                path_at[h5py.h5o.get_info(obj.id).addr] = path
        except (OSError, KeyError, TypeError, ValueError, RuntimeError):  # an attribute h5py cannot decode
            continue
    for path, obj in objects:
        if isinstance(obj, h5py.Group):
            groups += 1
            continue
        if not isinstance(obj, h5py.Dataset):
            continue
        if obj.dtype.kind not in "iuf" or obj.shape is None:
            non_numeric += 1
            continue
        group = path.rpartition("/")[0]
        try:  # only the attributes the model reads (a producer's long descriptions are never decoded)
            attrs = {k: obj.attrs[k] for k in obj.attrs if k in _ATTRIBUTES_READ}
        except (OSError, KeyError, TypeError, ValueError, RuntimeError):  # an attribute h5py cannot decode
            attrs = {}
        shape = tuple(int(n) for n in obj.shape)
        is_scale = _text(attrs.get("CLASS")) == "DIMENSION_SCALE" and len(shape) == 1
        array = Array(path=path, shape=shape, dtype=obj.dtype.str, itemsize=obj.dtype.itemsize,
                      # a dimension scale is its own dimension (it has no DIMENSION_LIST of its own)
                      dims=(path,) if is_scale else _dimension_names(obj, group, path_at) if shape else (), nbytes=int(np.prod(shape or (1,))) * obj.dtype.itemsize,
                      outside_file=data_outside_file(obj))
        fill = attrs.get("_FillValue")
        if fill is not None:
            try:
                array.fill_value = float(np.asarray(fill).reshape(-1)[0])
            except (TypeError, ValueError, IndexError):
                pass
        _classify(array, attrs)
        arrays[path] = array
        attrs_of[path] = attrs
    # what other arrays name as their coordinates or bounds is a coordinate or bounds
    for path, attrs in attrs_of.items():
        for name in _text(attrs.get("coordinates")).split():
            target = _resolve(arrays, arrays[path].group, name)
            if target:
                arrays[target].is_coordinate = True
                arrays[target].is_flag = False
        for key in ("bounds", "climatology"):
            target = _resolve(arrays, arrays[path].group, _text(attrs.get(key)))
            if target:
                arrays[target].is_bounds = True
    root = {k: f.attrs[k] for k in ("Conventions", "conventions") if k in f.attrs}
    conventions = _text(next(iter(root.values()), ""))
    units = _units(f, arrays, attrs_of, conventions)
    # the file's role: the one whose units hold the most data bytes (ATL07's many small tables over
    # one 2-D histogram); coordinates-only units count when no unit holds data
    by_role: dict[str, int] = {}
    for unit in units:
        by_role[unit.role] = by_role.get(unit.role, 0) + (unit.nbytes if unit.variables else 0)
    if not any(by_role.values()):
        by_role = {u.role: by_role.get(u.role, 0) + u.nbytes for u in units}
    role = max(by_role, key=by_role.get) if by_role else "metadata-only"
    return Structure(file=location, role=role, arrays=arrays, units=units,
                     conventions=conventions, groups=groups, non_numeric=non_numeric)


def _resolve(arrays: dict, group: str, name: str) -> str | None:
    """A name from a ``coordinates`` / ``bounds`` attribute: absolute, else the group and its ancestors
    (netCDF-4's search by proximity), else a sibling group (TEMPO's ``product/`` naming ``geolocation/``)."""
    name = name.strip()
    if not name:
        return None
    if name.startswith("/"):
        return name.lstrip("/") if name.lstrip("/") in arrays else None
    parts = group.split("/") if group else []
    for depth in range(len(parts), -1, -1):
        candidate = "/".join(parts[:depth] + [name])
        if candidate in arrays:
            return candidate
    matches = _by_name(arrays).get(name, ())
    return matches[0] if len(matches) == 1 else None


_NAME_INDEX: dict[int, tuple[dict, dict]] = {}


def _by_name(arrays: dict) -> dict[str, list[str]]:
    """{base name: [paths]} of ``arrays``, built once per model (a lookup per coordinates attribute)."""
    cached = _NAME_INDEX.get(id(arrays))
    if cached is None or cached[0] is not arrays:
        index: dict[str, list[str]] = {}
        for path in sorted(arrays):
            index.setdefault(path.rpartition("/")[2], []).append(path)
        _NAME_INDEX.clear()
        cached = _NAME_INDEX[id(arrays)] = (arrays, index)
    return cached[1]


def _near(arrays: dict, array: Array, axis: str, shape: tuple) -> str | None:
    """The coordinate of ``axis`` nearest ``array`` with this shape: named by its ``coordinates``, else its
    dimension's scale, else in its group, its ancestors, then their sub-groups (GEDI's ``geolocation/``)."""
    candidates = [a for a in arrays.values() if a.axis == axis and a.shape == shape and a.path != array.path]
    if not candidates:
        return None
    parts = array.group.split("/") if array.group else []

    def distance(c: Array) -> tuple:
        cparts = c.group.split("/") if c.group else []
        common = 0
        for a, b in zip(parts, cparts):
            if a != b:
                break
            common += 1
        standard_first = 0 if c.name.lower() in ("lat", "latitude", "lon", "longitude", "time", "delta_time") else 1
        return (len(parts) - common, len(cparts) - common, standard_first, c.path)

    best = min(candidates, key=distance)
    return best.path if distance(best)[0] <= 1 else None


def _coordinates_attribute(arrays, attrs, array: Array) -> dict[str, str]:
    found = {}
    for name in _text(attrs.get("coordinates")).split():
        target = _resolve(arrays, array.group, name)
        if target and arrays[target].axis and arrays[target].axis not in found:
            found[arrays[target].axis] = target
    return found


def _separable(dataset) -> bool | None:
    """True when the 2-D latitude ``dataset`` holds one latitude per row (a projected grid), False when it
    varies along rows (a swath), None when three rows hold no valid value. Reads three rows."""
    import numpy as np

    rows = dataset.shape[0]
    seen = False
    for i in sorted({rows // 4, rows // 2, (3 * rows) // 4}):
        row = np.asarray(dataset[i, :], dtype="f8")
        valid = row[np.isfinite(row) & (np.abs(row) <= 90)]
        if valid.size >= 2:
            seen = True
            if valid.max() - valid.min() > 1e-6:
                return False
    return True if seen else None


def _units(f, arrays: dict, attrs_of: dict, conventions: str) -> list[Unit]:
    units: list[Unit] = []
    claimed: set[str] = set()
    # 1. radar volumes: ODIM_H5 (one sweep a dataset) and CfRadial (rays x gates over time x range)
    if conventions.upper().startswith("ODIM_H5"):
        sweeps = sorted((a for a in arrays.values() if len(a.shape) == 2 and a.name == "data"),
                        key=lambda a: -a.nbytes)
        if sweeps:
            units.append(Unit("radar", "", ("ray", "bin"), sweeps[0].shape, [a.path for a in sweeps], {},
                              record_axis=0, nbytes=sum(a.nbytes for a in sweeps),
                              why="ODIM_H5 polar volume: one datasetN/dataN/data (rays x bins) a sweep"))
            claimed |= {a.path for a in sweeps}
    elif "sweep_start_ray_index" in arrays and "range" in arrays:
        fields = [a for a in arrays.values() if len(a.shape) == 2 and a.dims[0].endswith("time")
                  and a.dims[1].endswith("range") and a.is_data]
        if fields:
            fields.sort(key=lambda a: -a.nbytes)
            units.append(Unit("radar", "", fields[0].dims, fields[0].shape, [a.path for a in fields],
                              {"T": "time"} if "time" in arrays else {}, record_axis=0,
                              nbytes=sum(a.nbytes for a in fields),
                              why="CfRadial: fields over (time, range), rays of sweeps by sweep_start_ray_index"))
            claimed |= {a.path for a in fields}
    # 2. each array of 2+ dims: its coordinates, then grid / swath / nd
    for array in arrays.values():
        if array.path in claimed or len(array.shape) < 1:
            continue
        attrs = attrs_of[array.path]
        coords = _coordinates_attribute(arrays, attrs, array)
        for axis, dim in zip(range(len(array.dims)), array.dims):
            scale = arrays.get(dim)
            if scale is not None and scale.axis and scale.axis not in coords and scale.path != array.path:
                coords[scale.axis] = scale.path
        array.coordinates = coords
    spatial = {}
    for array in (a for a in arrays.values() if a.is_data and len(a.shape) >= 2 and a.path not in claimed):
        coords = dict(array.coordinates)
        lat, lon = coords.get("Y"), coords.get("X")
        if not (lat and lon):  # 2-D geolocation over the first two dimensions, near the array
            lat = lat or _near(arrays, array, "Y", array.shape[:2])
            lon = lon or _near(arrays, array, "X", array.shape[:2])
        if lat and lon:
            coords.update(Y=lat, X=lon)
        array.coordinates = coords
        spatial[array.path] = coords
    # 2-D geolocation without data over it (OMPS's geolocation-only granule, SMAP's prefetch): its own unit
    pairs = {}
    for a in arrays.values():
        if a.axis == "Y" and len(a.shape) == 2:
            lon = _near(arrays, a, "X", a.shape)
            if lon:
                pairs[a.path] = lon
    separable_cache: dict[str, bool | None] = {}

    def separable(lat_path: str) -> bool | None:
        if lat_path not in separable_cache:
            lat = arrays[lat_path]
            separable_cache[lat_path] = (_separable(f[lat_path]) if lat.nbytes <= SMALL_COORDINATE_BYTES
                                         and not lat.outside_file else None)
        return separable_cache[lat_path]

    by_key: dict[tuple, list[Array]] = {}
    for path, coords in spatial.items():
        array = arrays[path]
        lat = coords.get("Y")
        if lat and len(arrays[lat].shape) == 1 and coords.get("X"):
            # a grid: latitude and longitude over two different axes of the array (not one track's
            # positions, as ICESat-2's histograms along delta_time have)
            lat_dim, lon_dim = arrays[lat].dims[0], arrays[coords["X"]].dims[0]
            role = "grid" if lat_dim != lon_dim and lat_dim in array.dims and lon_dim in array.dims else None
        elif lat and len(arrays[lat].shape) == 2:
            role = "grid" if separable(lat) else "swath"
        else:
            role = None
        if role is None:  # (left for the tables, whose rows it may extend, else an N-D array of its own)
            continue
        by_key.setdefault((role, array.dims, coords.get("Y"), coords.get("X")), []).append(array)
    for (role, dims, lat, lon), members in by_key.items():
        members.sort(key=lambda a: -a.nbytes)
        first = members[0]
        coords = dict(first.coordinates)
        record = None
        if role == "grid":
            time_axes = [i for i, d in enumerate(dims) if d in arrays and arrays[d].axis == "T"]
            record = time_axes[0] if time_axes else None
            why = ("1-D latitude/longitude coordinates" if lat and len(arrays[lat].shape) == 1
                   else "2-D latitude/longitude constant along rows (a projected grid)")
            why += f", record axis {dims[record]}" if record is not None else ", no time axis"
        elif role == "swath":
            record = 0
            why = f"2-D latitude/longitude ({lat}) varying along scan lines and across them"
        else:
            record = 0
            why = "arrays of 2+ dimensions without latitude/longitude"
        units.append(Unit(role, first.group, dims, first.shape, [a.path for a in members], coords, record,
                          sum(a.nbytes for a in members), why))
        claimed |= {a.path for a in members}
    for lat, lon in pairs.items():
        if any(u.coordinates.get("Y") == lat for u in units):
            continue
        geo = arrays[lat]
        role = "grid" if separable(lat) else "swath"
        units.append(Unit(role, geo.group, geo.dims, geo.shape, [], {"Y": lat, "X": lon}, 0 if role == "swath" else None,
                          geo.nbytes + arrays[lon].nbytes,
                          f"2-D latitude/longitude only (no data array over them): "
                          f"{'constant along rows, a projected grid' if role == 'grid' else 'a swath geolocation'}"))
    # 3. tables: 1-D arrays (and arrays whose first dimension is the row) sharing a row dimension in a group
    tables: dict[tuple, list[Array]] = {}
    for array in arrays.values():
        if array.path in claimed or not array.shape or array.shape[0] < 2:
            continue
        if len(array.shape) > 2:
            continue
        tables.setdefault((array.group, array.dims[0]), []).append(array)
    for (group, row_dim), members in tables.items():
        ones = [a for a in members if len(a.shape) == 1]
        data = sorted((a for a in members if a.is_data), key=lambda a: -a.nbytes)
        if not ones or (len(ones) < 2 and not data):  # (a lone 1-D data array is a table of one column)
            continue
        rows = members[0].shape[0]
        coords = {}
        for axis in ("T", "Y", "X", "Z"):
            found = [a for a in ones if a.axis == axis]
            if not found and members[0].coordinates.get(axis) and len(arrays[members[0].coordinates[axis]].shape) == 1:
                found = [arrays[members[0].coordinates[axis]]]
            if not found:
                near = _near(arrays, members[0], axis, (rows,))
                found = [arrays[near]] if near else []
            if found:
                found.sort(key=lambda a: (a.name.lower() not in ("time", "delta_time", "latitude", "longitude", "lat", "lon"), a.path))
                coords[axis] = found[0].path
        role, why = "table", (f"{len(ones)} parallel 1-D arrays of {rows} rows" if len(ones) > 1
                              else f"one 1-D array of {rows} values")
        if coords.get("T") and _at_one_place(f, arrays, coords):
            role, why = "timeseries", f"{len(ones)} parallel arrays over {rows} times at one place"
        units.append(Unit(role, group, (row_dim,), (rows,), [a.path for a in data], coords, 0,
                          sum(a.nbytes for a in data), why))
    # 4. whatever numeric array of 2+ dims is left
    for array in arrays.values():
        if array.path in claimed or len(array.shape) < 2 or not array.is_data:
            continue
        if any(array.path in u.variables for u in units):
            continue
        units.append(Unit("nd", array.group, array.dims, array.shape, [array.path], array.coordinates, 0,
                          array.nbytes, "an array of 2+ dimensions outside any grid, swath or table"))
    units.sort(key=lambda u: -u.nbytes)
    return units


def _at_one_place(f, arrays: dict, coords: dict) -> bool:
    """A table over time at one place: latitude and longitude (when present) equal at both ends, or absent."""
    import numpy as np

    for axis in ("Y", "X"):
        path = coords.get(axis)
        if not path:
            continue
        array = arrays[path]
        if array.outside_file:
            return False
        ends = np.asarray([f[path][0], f[path][-1]], dtype="f8")
        if not (np.all(np.isnan(ends)) or ends[0] == ends[1]):
            return False
    return bool(coords.get("Y") or arrays[coords["T"]].dims[0].rpartition("/")[2] == "time")


# The s3fs blocks the plan step reads an upload in (metadata and small coordinates; docs/pipeline-and-plans.md,
# "The plan step's reads"): a file of up to SMALL_FILE_BYTES in 4 MiB blocks (its metadata is everywhere in it:
# read whole in a few requests), a larger one in 256 KiB blocks (a 4 MiB block holding a few KiB of object
# headers moves megabytes for nothing: the 0.93 GB ATL03-like sample's plan read 71.3 MB in 17 GETs with
# 4 MiB blocks, 5.5 MB in 21 with 256 KiB).
SMALL_FILE_BLOCK = 4 * 2**20
LARGE_FILE_BLOCK = 256 * 2**10
SMALL_FILE_BYTES = 64 * 2**20


def plan_block_size(file_bytes: int) -> int:
    return SMALL_FILE_BLOCK if file_bytes <= SMALL_FILE_BYTES else LARGE_FILE_BLOCK


@contextmanager
def open_location(location: str, counter=None):
    """The h5py file at ``location`` (a path, or an s3:// URL read through s3fs in 4 MiB blocks), opened as
    every reader of an uploaded file opens it (``hdf5_input.open_input``: no external links). ``counter`` (a
    ``bench.accounting.RequestCounter``) counts every S3 request made through it."""
    with open_location_stream(location, counter) as (f, _read):
        yield f


@contextmanager
def open_location_stream(location: str, counter=None):
    """``(h5py file, read)`` where ``read(offset, size)`` reads bytes of the same file through the same stream
    (and its 4 MiB block cache): a second parser of the file (h5coro's probe) re-reads no block h5py read."""
    import threading

    from layoutlab.hdf5_input import open_input
    from layoutlab.storage import aio_session, is_s3_url, s3fs_filesystem

    lock = threading.Lock()

    def reader(stream, block_size: int):
        def read(offset: int, size: int) -> bytes:
            with lock:  # (h5py seeks before each read it makes: the stream's position is nobody's state)
                stream.seek(offset)
                return stream.read(size)
        read.block_size = block_size  # (a second parser reading in this unit reads the same blocks)
        return read

    if is_s3_url(location):
        # (a session of its own, with the process's parsed S3 models: in a forked worker, no instance or
        # client of the parent's is usable, and parsing the models again cost most of a small file's read)
        if counter is not None:
            from layoutlab.bench.accounting import aiobotocore_session

            session = aio_session(aiobotocore_session(counter))
        else:
            session = aio_session()
        fs = s3fs_filesystem(for_url=location, skip_instance_cache=True, session=session)
        with fs.open(location, "rb", block_size=LARGE_FILE_BLOCK, cache_type="blockcache") as stream:
            if plan_block_size(stream.size) != stream.blocksize:  # (its size is known once open: one HEAD)
                from fsspec.caching import BlockCache

                stream.blocksize = plan_block_size(stream.size)
                stream.cache = BlockCache(stream.blocksize, stream._fetch_range, stream.size)
            with open_input(stream, location) as f:
                yield f, reader(stream, stream.blocksize)
    else:
        with open_input(location) as f, open(location, "rb") as stream:
            yield f, reader(stream, SMALL_FILE_BLOCK)


def file_structure(location: str) -> Structure:
    """The structure of the file at ``location`` (a path or s3:// URL); data outside the file is never read."""
    from layoutlab.errors import BadInputFile

    try:
        with open_location(location) as f:
            return read_structure(f, location)
    except OSError as error:
        raise BadInputFile(location, f"cannot be read as HDF5: {str(error).splitlines()[0]}") from None
