"""Access patterns: what a scientist asks of a file, split into select and load.

``select(handle, params)`` finds what to read (coordinate reads, searches);
``load(handle, selection)`` reads it (and reduces it, for means). Both run
inside the timed region; the checksum (``expected``) runs after it.

Gridded data (time, lat, lon), after Nguyen et al. 2023:
  timeseries-point        lat=47.61 lon=-122.19 (their Seattle point)
  map-timestep            time_index (default: the middle step)
  timeseries-region-mean  lat 38.21..42.25, lon -84.91..-80.5 (their Ohio box), mean over lat/lon
  map-time-mean           time_start=0, hours=6, mean over time
ATL03-like granules, after Lopez et al.:
  granule-open-list       open, visit every group/dataset, read every attribute
  beam-read               one beam's heights/h_ph (beam=gt1l); mean=true also averages it
  beam-subset             h_ph of the photons with lat_min <= lat_ph <= lat_max
                          (default: the middle tenth of the beam's latitude span)
Any array, after Earthmover / Xu et al.:
  full-read-throughput    a whole variable; the record reports Gbps
  slab-read               worker K of N reads its share along axis 0 (scaling=strong:
                          the variable split N ways; weak: rows_per_worker rows each)
"""

from __future__ import annotations

import abc

import math
from dataclasses import dataclass, field

import numpy as np

from layoutlab.errors import UserError

GRID_VARIABLE = "BCEXTTAU"
ATL03_BEAM = "gt1l"


class PatternMismatch(UserError):
    """The pattern does not fit the data (wrong dimensionality, out of range, missing variable)."""


@dataclass
class Read:
    """One array read: ``path[index]``, optionally reduced with a mean over ``mean_axes``."""

    path: str
    index: tuple  # of slices / ints
    mean_axes: tuple | None = None

    def to_dict(self) -> dict:
        def enc(i):
            return [i.start, i.stop] if isinstance(i, slice) else int(i)

        return {"path": self.path, "index": [enc(i) for i in self.index], "mean_axes": self.mean_axes}


@dataclass
class Selection:
    reads: list[Read] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # what was resolved (indices, coordinates) for the record


@dataclass
class Loaded:
    values: list  # one numpy array per Read (None for listings)
    points: int  # values read (objects for listings)
    bytes_needed: int | None  # uncompressed bytes of the values asked for
    summary: dict = field(default_factory=dict)


def _count(index, shape) -> int:
    n = 1
    for i, size in zip(index, shape):
        if isinstance(i, slice):
            start, stop, _ = i.indices(size)
            n *= max(0, stop - start)
    for size in shape[len(index):]:
        n *= size
    return n


def _load_reads(handle, reads: list[Read]) -> Loaded:
    values, points, needed = [], 0, 0
    for read in reads:
        array = handle.array(read.path)
        data = np.asarray(array[read.index])
        count = _count(read.index, array.shape)
        points += count
        needed += count * np.dtype(array.dtype).itemsize
        if read.mean_axes is not None:
            data = data.mean(axis=read.mean_axes, dtype="f8")
        values.append(data)
    return Loaded(values, points, needed)


def _array(handle, path):
    try:
        return handle.array(path)
    except (KeyError, FileNotFoundError, ValueError) as error:
        raise PatternMismatch(f"no array {path!r} ({error})") from error


# -- gridded ------------------------------------------------------------------
def _grid(handle, params):
    variable = params["variable"]
    var = _array(handle, variable)
    if len(var.shape) != 3:
        raise PatternMismatch(f"{variable!r} has shape {tuple(var.shape)}; this pattern needs (time, lat, lon)")
    lat = np.asarray(_array(handle, params.get("lat_name", "lat"))[:], dtype="f8")
    lon = np.asarray(_array(handle, params.get("lon_name", "lon"))[:], dtype="f8")
    if lat.size != var.shape[1] or lon.size != var.shape[2]:
        raise PatternMismatch(f"lat/lon sizes {lat.size}/{lon.size} do not match {variable!r} {tuple(var.shape)}")
    return var, lat, lon


def _nearest(coord, value, name):
    if not coord.min() - 1e-9 <= value <= coord.max() + 1e-9:
        raise PatternMismatch(f"{name}={value} is outside the grid ({coord.min():g}..{coord.max():g})")
    return int(np.argmin(np.abs(coord - value)))


def _box(coord, low, high, name):
    if low > high or high < coord.min() or low > coord.max():
        raise PatternMismatch(f"{name} box {low}..{high} is outside the grid ({coord.min():g}..{coord.max():g})")
    idx = np.nonzero((coord >= low) & (coord <= high))[0]
    if idx.size == 0:  # a box smaller than one grid cell: the cell nearest its centre
        centre = _nearest(coord, (low + high) / 2, name)
        return slice(centre, centre + 1)
    return slice(int(idx[0]), int(idx[-1]) + 1)


class Pattern(abc.ABC):
    name = ""
    defaults: dict = {}

    def params(self, given: dict | None) -> dict:
        unknown = set(given or {}) - set(self.defaults)
        if unknown:
            raise UserError(f"pattern {self.name}: unknown parameter(s) {sorted(unknown)}; "
                            f"known: {sorted(self.defaults)}")
        return {**self.defaults, **(given or {})}

    def group(self, params) -> str | None:
        """The HDF5 group of the arrays this pattern reads ('' the root), None when it visits the whole tree.

        A reader that opens one group at a time (xarray) opens this one, once, as its users do."""
        return _group_of(params.get("variable") or "")

    @abc.abstractmethod
    def select(self, handle, params) -> Selection:
        """What to read for ``params`` (coordinate lookups and searches happen here)."""

    def load(self, handle, selection: Selection) -> Loaded:
        return _load_reads(handle, selection.reads)


class TimeseriesPoint(Pattern):
    name = "timeseries-point"
    defaults = {"variable": GRID_VARIABLE, "lat": 47.61, "lon": -122.19}

    def select(self, handle, p):
        var, lat, lon = _grid(handle, p)
        i, j = _nearest(lat, p["lat"], "lat"), _nearest(lon, p["lon"], "lon")
        return Selection([Read(p["variable"], (slice(None), i, j))], {"lat_index": i, "lon_index": j})


class MapTimestep(Pattern):
    name = "map-timestep"
    defaults = {"variable": GRID_VARIABLE, "time_index": None}

    def select(self, handle, p):
        var, _, _ = _grid(handle, p)
        t = var.shape[0] // 2 if p["time_index"] is None else int(p["time_index"])
        if not 0 <= t < var.shape[0]:
            raise PatternMismatch(f"time_index={t} outside 0..{var.shape[0] - 1}")
        return Selection([Read(p["variable"], (t, slice(None), slice(None)))], {"time_index": t})


class TimeseriesRegionMean(Pattern):
    name = "timeseries-region-mean"
    defaults = {"variable": GRID_VARIABLE, "lat_min": 38.21, "lat_max": 42.25, "lon_min": -84.91, "lon_max": -80.5}

    def select(self, handle, p):
        var, lat, lon = _grid(handle, p)
        la = _box(lat, p["lat_min"], p["lat_max"], "lat")
        lo = _box(lon, p["lon_min"], p["lon_max"], "lon")
        return Selection([Read(p["variable"], (slice(None), la, lo), mean_axes=(1, 2))],
                         {"lat_slice": [la.start, la.stop], "lon_slice": [lo.start, lo.stop]})


class MapTimeMean(Pattern):
    name = "map-time-mean"
    defaults = {"variable": GRID_VARIABLE, "time_start": 0, "hours": 6}

    def select(self, handle, p):
        var, _, _ = _grid(handle, p)
        t0, n = int(p["time_start"]), int(p["hours"])
        if n < 1 or t0 < 0 or t0 + n > var.shape[0]:
            raise PatternMismatch(f"time range {t0}..{t0 + n} does not fit {var.shape[0]} time steps")
        return Selection([Read(p["variable"], (slice(t0, t0 + n), slice(None), slice(None)), mean_axes=(0,))],
                         {"time_slice": [t0, t0 + n]})


# -- granules -----------------------------------------------------------------
class GranuleOpenList(Pattern):
    name = "granule-open-list"
    defaults = {}

    def group(self, params):
        return None

    def select(self, handle, p):
        return Selection([], {})

    def load(self, handle, selection):
        counts = handle.listing()
        return Loaded([], counts["objects"], None, counts)


def _beam_path(p, name):
    return f"{p['beam']}/heights/{name}"


def _group_of(path: str) -> str:
    return path.strip("/").rpartition("/")[0]


class BeamRead(Pattern):
    name = "beam-read"
    # mean: also average what was read, as NSIDC's ATL03 benchmark does (the mean goes into the record)
    defaults = {"beam": ATL03_BEAM, "variable": "h_ph", "mean": False}

    def group(self, params):
        return _group_of(_beam_path(params, params["variable"]))

    def select(self, handle, p):
        path = _beam_path(p, p["variable"])
        _array(handle, path)
        return Selection([Read(path, (slice(None),), mean_axes=(0,) if p["mean"] else None)], {"path": path})

    def load(self, handle, selection):
        loaded = _load_reads(handle, selection.reads)
        if selection.reads[0].mean_axes is not None:
            loaded.summary["mean"] = float(loaded.values[0])
        return loaded


class BeamSubset(Pattern):
    name = "beam-subset"
    defaults = {"beam": ATL03_BEAM, "variable": "h_ph", "lat_min": None, "lat_max": None}

    def group(self, params):
        return _group_of(_beam_path(params, params["variable"]))

    def select(self, handle, p):
        lat = np.asarray(_array(handle, _beam_path(p, "lat_ph"))[:])
        if lat.size == 0:
            raise PatternMismatch(f"{_beam_path(p, 'lat_ph')} is empty")
        span = lat.max() - lat.min()
        low = lat.min() + 0.45 * span if p["lat_min"] is None else float(p["lat_min"])
        high = lat.min() + 0.55 * span if p["lat_max"] is None else float(p["lat_max"])
        idx = np.nonzero((lat >= low) & (lat <= high))[0]
        if idx.size == 0:
            raise PatternMismatch(f"no photons with {low:g} <= lat_ph <= {high:g} in beam {p['beam']}")
        # ATL03 photons are in time order, so a latitude window is one contiguous run
        sel = slice(int(idx[0]), int(idx[-1]) + 1)
        return Selection([Read(_beam_path(p, p["variable"]), (sel,))],
                         {"photon_slice": [sel.start, sel.stop], "lat_min": low, "lat_max": high})


# -- any array ----------------------------------------------------------------
def _default_variable(handle, p):
    if p.get("variable"):
        return p["variable"]
    for candidate in (GRID_VARIABLE, f"{ATL03_BEAM}/heights/h_ph"):
        if handle.has(candidate):
            return candidate
    raise PatternMismatch("no default variable found (BCEXTTAU, gt1l/heights/h_ph): pass params.variable")


class FullReadThroughput(Pattern):
    name = "full-read-throughput"
    defaults = {"variable": None}

    def select(self, handle, p):
        path = _default_variable(handle, p)
        array = _array(handle, path)
        return Selection([Read(path, tuple(slice(None) for _ in array.shape))], {"path": path})


class SlabRead(Pattern):
    name = "slab-read"
    defaults = {"variable": None, "workers": 4, "worker": 0, "scaling": "strong", "rows_per_worker": None}

    def select(self, handle, p):
        path = _default_variable(handle, p)
        array = _array(handle, path)
        n, k, rows = int(p["workers"]), int(p["worker"]), array.shape[0]
        if n < 1 or not 0 <= k < n:
            raise PatternMismatch(f"worker {k} of {n}: need 0 <= worker < workers")
        if p["scaling"] == "strong":
            share = math.ceil(rows / n)
        elif p["scaling"] == "weak":
            share = int(p["rows_per_worker"] or max(1, rows // 16))
            if share * n > rows:
                raise PatternMismatch(f"weak scaling: {n} workers x {share} rows exceed the {rows} rows of {path!r}")
        else:
            raise PatternMismatch(f"scaling must be 'strong' or 'weak', got {p['scaling']!r}")
        start, stop = min(rows, k * share), min(rows, (k + 1) * share)
        index = (slice(start, stop),) + tuple(slice(None) for _ in array.shape[1:])
        return Selection([Read(path, index)], {"path": path, "rows": [start, stop]})


PATTERNS = {p.name: p for p in (TimeseriesPoint(), MapTimestep(), TimeseriesRegionMean(), MapTimeMean(),
                                 GranuleOpenList(), BeamRead(), BeamSubset(), FullReadThroughput(), SlabRead())}


def get_pattern(name: str) -> Pattern:
    """Today's named patterns, or a family of ``bench/families.py`` (planned from a file's structure)."""
    from layoutlab.bench.families import FAMILIES

    # a family's case label numbers its second and later cases in one file: "column-read:2"
    found = PATTERNS.get(name) or FAMILIES.get(name.split(":", 1)[0])
    if found is None:
        raise UserError(f"unknown pattern {name!r}; choose from {', '.join([*PATTERNS, *FAMILIES])}")
    return found


# -- checking values against the source ----------------------------------------
def source_kind(attrs: dict) -> str | None:
    """'geos' or 'atl03' for layoutlab's samples (their values can be regenerated), else None."""
    def text(v):
        return v.decode() if isinstance(v, bytes) else str(v)

    if "GEOS-FP-like" in text(attrs.get("Title", "")):
        return "geos"
    if text(attrs.get("short_name", "")) == "ATL03" and "layoutlab" in text(attrs.get("description", "")):
        return "atl03"
    return None


def _geos_expected(read: Read, shape, seed: int):
    from layoutlab.samples.geos import VARIABLE, GeosGrid, geos_values

    if read.path.strip("/") != VARIABLE:
        return None
    grid = GeosGrid(tuple(int(n) for n in shape))
    t_idx, la, lo = (read.index + (slice(None),) * 3)[:3]
    t_sel = slice(t_idx, t_idx + 1) if not isinstance(t_idx, slice) else t_idx
    t0, t1, _ = t_sel.indices(shape[0])
    block = max(1, (32 * 2**20) // (shape[1] * shape[2] * 4))
    parts = []
    for start in range(t0, t1, block):
        values = geos_values(grid, start, min(t1, start + block), seed=seed)
        parts.append(values[:, la, lo])
    out = np.concatenate(parts, axis=0)
    if not isinstance(t_idx, slice):
        out = out[0]
    if read.mean_axes is not None:
        out = out.mean(axis=read.mean_axes, dtype="f8")
    return out


# Photons regenerated per block when checking an ATL03-like read: photon_values makes every heights
# variable of its block (~50 bytes a photon), so a whole beam of a 7 GB granule (47 M photons) made at
# once needs ~2.5 GB, more than the 1769 MB case it checks.
ATL03_CHECK_BLOCK = 1_000_000


def _atl03_expected(read: Read, shape, seed: int):
    from layoutlab.samples.atl03 import BEAMS, photon_values

    parts = read.path.strip("/").split("/")
    if len(parts) != 3 or parts[0] not in BEAMS or parts[1] != "heights":
        return None
    beam, name = parts[0], parts[2]
    first = read.index[0]
    one_row = not isinstance(first, slice)  # a family's multi-variable reads one row: (row,)
    if one_row:
        first = slice(int(first), int(first) + 1)
    start, stop, _ = first.indices(shape[0])
    rest = (slice(None),) + tuple(read.index[1:])

    def blocks():
        for a in range(start, stop, ATL03_CHECK_BLOCK):
            yield a - start, photon_values(beam, a, min(stop, a + ATL03_CHECK_BLOCK), seed=seed)[name][rest]

    sample = photon_values(beam, start, min(stop, start + 1), seed=seed).get(name)
    if sample is None:
        return None
    tail, dtype = sample[rest].shape[1:], sample.dtype
    if read.mean_axes == (0,):  # a sum carried block by block: the expected mean without the whole array
        total = np.zeros(tail, "f8")
        for _, block in blocks():
            total += block.sum(axis=0, dtype="f8")
        return total / (stop - start) if stop > start else np.full(tail, np.nan)
    out = np.empty((max(0, stop - start),) + tail, dtype)
    for offset, block in blocks():
        out[offset:offset + block.shape[0]] = block
    if one_row:
        out = out[0]
    if read.mean_axes is not None:
        out = out.mean(axis=read.mean_axes, dtype="f8")
    return out


def values_digest(values) -> str:
    """SHA-256 of values as numbers: each array as little-endian float64 in C order, NaN written one way, so
    that a reader returning another byte order or integer width for the same numbers gives the same digest."""
    import hashlib

    digest = hashlib.sha256()
    for value in values:
        flat = np.asarray(value).reshape(-1)
        digest.update(str(np.shape(value)).encode())
        for start in range(0, flat.size, 2**20):  # block by block: no float64 copy of a whole large read
            block = flat[start:start + 2**20].astype("<f8")
            block[np.isnan(block)] = np.nan
            digest.update(block.tobytes())
    return digest.hexdigest()


def _packed_back(handle, selection: Selection, loaded: Loaded) -> list | None:
    """What a decoding reader (xarray) read, packed back into the stored integers, read by read; None when
    no read is of a packed variable, or a read is a mean (a mean has no stored integers)."""
    packed, any_packed = [], False
    for read, got in zip(selection.reads, loaded.values):
        array = handle.array(read.path)
        stored = array.as_stored(got) if hasattr(array, "as_stored") else None
        if stored is not None and read.mean_axes is not None:
            return None
        any_packed |= stored is not None
        packed.append(got if stored is None else stored)
    return packed if any_packed else None


def check_values(handle, selection: Selection, loaded: Loaded, seed: int | None = None) -> bool | None:
    """True/False when the values could be regenerated from the source, None otherwise."""
    if not selection.reads:
        return None
    attrs = handle.attrs()
    kind = source_kind(attrs)
    if kind is None:
        # any other file: its values cannot be regenerated; their digest goes into the record (after the
        # timed region, as this check does) for the values of every variant to be compared with the original's
        loaded.summary["values_sha256"] = values_digest(loaded.values)
        loaded.summary["values_dtypes"] = sorted({str(np.asarray(value).dtype) for value in loaded.values})
        stored = _packed_back(handle, selection, loaded)
        if stored is not None:
            loaded.summary["values_stored_sha256"] = values_digest(stored)
        return None
    if seed is None:
        seed = int(attrs.get("seed", 0)) if kind == "atl03" else 0
    verdicts = []
    for read, got in zip(selection.reads, loaded.values):
        shape = handle.array(read.path).shape
        expected = (_geos_expected if kind == "geos" else _atl03_expected)(read, shape, seed)
        if expected is None:
            return None
        got = np.asarray(got)
        if got.shape != expected.shape:
            return False
        if read.mean_axes is not None:
            verdicts.append(bool(np.allclose(got, expected, rtol=1e-6, atol=0)))
        else:
            verdicts.append(bool(np.array_equal(got, expected)))
    return all(verdicts)
