"""Pattern families: what a scientist asks of any file, parametrised by its structure, not by names.

Each family reads by array path and index; the plan step (``pipeline/families.py``) fills the
parameters from the file's structure model (``layoutlab/structure.py``): which variables, which
record axis, which location (the middle of the file's own coordinate ranges, moved off fill values).

  open-list       open, visit every group / array, read every attribute (any file)
  variable-read   one whole variable
  column-read     one whole column of one table group
  record-slice    one step of the record axis (a time step's map, a scan line, a ray)
  point-series    everything along one axis at one location (a time series, a profile, one gate)
  box             a latitude / longitude box over 1-D coordinates or 2-D geolocation (a swath
                  subset); the coordinates are read inside the case, as a user's subsetter reads them
  row-subset      several columns of one table over a coordinate range (the beam subset, generalised)
  multi-variable  several variables at one location (what an analysis reads)

Today's grid and ATL03 patterns (``bench/patterns.py``) are these families at the published
parameters: ``timeseries-point`` is a point-series at Nguyen et al.'s Seattle point, ``map-timestep``
a record-slice, ``timeseries-region-mean`` a box (with a mean), ``beam-read`` a column-read,
``beam-subset`` a row-subset over ``lat_ph``, ``granule-open-list`` the open-list. They stay under
their names so that the samples' cases, and the published comparisons, keep their numbers.

An index is given as a list, one entry per axis: an integer (that position), ``[start, stop]``
(a range) or ``None`` (the whole axis).
"""

from __future__ import annotations

import numpy as np

from layoutlab.bench.patterns import (GranuleOpenList, Loaded, Pattern, PatternMismatch, Read, Selection,
                                      _array, _group_of, _load_reads)


def _index(spec, shape, path) -> tuple:
    if len(spec) != len(shape):
        raise PatternMismatch(f"index {spec} has {len(spec)} axes; {path!r} has shape {tuple(shape)}")
    out = []
    for entry, size in zip(spec, shape):
        if entry is None:
            out.append(slice(None))
        elif isinstance(entry, (list, tuple)):
            start, stop = int(entry[0]), int(entry[1])
            if not 0 <= start < stop <= size:
                raise PatternMismatch(f"range {start}..{stop} outside 0..{size} of {path!r}")
            out.append(slice(start, stop))
        else:
            if not 0 <= int(entry) < size:
                raise PatternMismatch(f"position {entry} outside 0..{size - 1} of {path!r}")
            out.append(int(entry))
    return tuple(out)


def _whole(array) -> np.ndarray:
    """All of a coordinate array, as float64 (an index of whole slices: what every reader's arrays take)."""
    return np.asarray(array[tuple(slice(None) for _ in array.shape)], dtype="f8")


class OpenList(GranuleOpenList):
    name = "open-list"


class VariableRead(Pattern):
    name = "variable-read"
    defaults = {"variable": None}

    def select(self, handle, p):
        if not p["variable"]:
            raise PatternMismatch(f"{self.name}: no variable given (the plan names one from the file's structure)")
        array = _array(handle, p["variable"])
        return Selection([Read(p["variable"], tuple(slice(None) for _ in array.shape))], {"path": p["variable"]})


class ColumnRead(VariableRead):
    name = "column-read"


class IndexedRead(Pattern):
    """A read of one variable at an index the plan computed (record-slice, point-series)."""

    defaults = {"variable": None, "index": None}

    def select(self, handle, p):
        if not p["variable"] or p["index"] is None:
            raise PatternMismatch(f"{self.name}: needs a variable and an index (the plan gives them)")
        array = _array(handle, p["variable"])
        index = _index(p["index"], array.shape, p["variable"])
        return Selection([Read(p["variable"], index)], {"path": p["variable"], "index": p["index"]})


class RecordSlice(IndexedRead):
    name = "record-slice"


class PointSeries(IndexedRead):
    name = "point-series"


class MultiVariable(Pattern):
    name = "multi-variable"
    defaults = {"variables": None, "index": None}

    def group(self, params):
        return _group_of((params.get("variables") or [""])[0])

    def select(self, handle, p):
        if not p["variables"] or p["index"] is None:
            raise PatternMismatch(f"{self.name}: needs variables and an index (the plan gives them)")
        reads = []
        for path in p["variables"]:
            array = _array(handle, path)
            reads.append(Read(path, _index(p["index"], array.shape, path)))
        return Selection(reads, {"paths": list(p["variables"]), "index": p["index"]})


def _bounding(mask: np.ndarray):
    """The index box ((start, stop) per axis) holding every True of ``mask``, or None."""
    if not mask.any():
        return None
    box = []
    for axis in range(mask.ndim):
        other = tuple(a for a in range(mask.ndim) if a != axis)
        hit = np.nonzero(mask.any(axis=other) if other else mask)[0]
        box.append((int(hit[0]), int(hit[-1]) + 1))
    return box


class Box(Pattern):
    """A latitude / longitude box: the coordinates read (whole), the cells inside found, their bounding index
    box read from the variable (every other axis whole: all times of a grid, all bins of a swath)."""

    name = "box"
    defaults = {"variable": None, "lat": None, "lon": None, "lat_axis": None, "lon_axis": None,
                "lat_min": None, "lat_max": None, "lon_min": None, "lon_max": None}

    def select(self, handle, p):
        missing = [k for k in ("variable", "lat", "lon", "lat_axis", "lon_axis", "lat_min", "lat_max",
                               "lon_min", "lon_max") if p[k] is None]
        if missing:
            raise PatternMismatch(f"{self.name}: missing {', '.join(missing)} (the plan gives them)")
        array = _array(handle, p["variable"])
        lat = _whole(_array(handle, p["lat"]))
        lon = _whole(_array(handle, p["lon"]))
        lat_axis, lon_axis = int(p["lat_axis"]), int(p["lon_axis"])
        if lat.ndim == 2:  # 2-D geolocation over axes (lat_axis, lon_axis) of the variable
            inside = ((lat >= p["lat_min"]) & (lat <= p["lat_max"]) & (lon >= p["lon_min"]) & (lon <= p["lon_max"]))
            box = _bounding(inside)
            boxes = {lat_axis: box[0], lon_axis: box[1]} if box else None
        else:
            rows = _bounding((lat >= p["lat_min"]) & (lat <= p["lat_max"]))
            cols = _bounding((lon >= p["lon_min"]) & (lon <= p["lon_max"]))
            boxes = {lat_axis: rows[0], lon_axis: cols[0]} if rows and cols else None
        if not boxes:
            raise PatternMismatch(f"no cell of {p['variable']!r} inside lat {p['lat_min']:g}..{p['lat_max']:g}, "
                                  f"lon {p['lon_min']:g}..{p['lon_max']:g}")
        index = tuple(slice(*boxes[a]) if a in boxes else slice(None) for a in range(len(array.shape)))
        return Selection([Read(p["variable"], index)],
                         {"path": p["variable"], "box": {str(a): list(b) for a, b in boxes.items()}})


class RowSubset(Pattern):
    """Several columns of one table over a range of its row coordinate (read whole inside the case, as
    beam-subset reads lat_ph); rows in range are taken as one run, first to last (along-track order)."""

    name = "row-subset"
    defaults = {"variables": None, "coordinate": None, "low": None, "high": None}

    def group(self, params):
        return _group_of((params.get("variables") or [""])[0])

    def select(self, handle, p):
        if not p["variables"] or p["coordinate"] is None or p["low"] is None or p["high"] is None:
            raise PatternMismatch(f"{self.name}: needs variables, a coordinate and a range (the plan gives them)")
        array = _array(handle, p["coordinate"])
        # the range is in stored units: a reader decoding CF packing (xarray) gives them back to compare
        coordinate = array.stored_whole() if hasattr(array, "stored_whole") else _whole(array)
        rows = np.nonzero((coordinate >= p["low"]) & (coordinate <= p["high"]))[0]
        if rows.size == 0:
            raise PatternMismatch(f"no row with {p['low']:g} <= {p['coordinate']} <= {p['high']:g}")
        run = slice(int(rows[0]), int(rows[-1]) + 1)
        reads = []
        for path in p["variables"]:
            array = _array(handle, path)
            reads.append(Read(path, (run,) + tuple(slice(None) for _ in array.shape[1:])))
        return Selection(reads, {"rows": [run.start, run.stop], "coordinate": p["coordinate"]})

    def load(self, handle, selection):
        return _load_reads(handle, selection.reads)


FAMILIES = {p.name: p for p in (OpenList(), VariableRead(), ColumnRead(), RecordSlice(), PointSeries(), Box(),
                                 RowSubset(), MultiVariable())}
FAMILY_NAMES = tuple(FAMILIES)
__all__ = ["FAMILIES", "FAMILY_NAMES", "Loaded"]
