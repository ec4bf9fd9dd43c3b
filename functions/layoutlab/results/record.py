"""Build and validate result records (``schema.json``, one versioned file).

``new_record(**fields)`` returns a dict with every required key present (None
where nothing was measured) so error records and ok records have one shape;
``validate_record`` checks one against the schema (with ``jsonschema`` when it
is installed, the dev extra; otherwise the required keys and the status).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform as _platform
import uuid
from functools import lru_cache
from importlib import metadata
from pathlib import Path

SCHEMA_PATH = Path(__file__).with_name("schema.json")
SCHEMA_VERSION = 1
# Every library that can change what a case reads or how (issue 16: "every library version goes
# into the record"): the readers' own, and the virtual-reference / Icechunk stack behind them.
VERSIONED_PACKAGES = ("layoutlab", "numpy", "h5py", "h5netcdf", "xarray", "zarr", "numcodecs", "obstore",
                      "s3fs", "fsspec", "boto3", "virtualizarr", "kerchunk", "icechunk", "h5coro")


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@lru_cache(maxsize=1)
def library_versions() -> dict:
    versions = {"python": _platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    try:
        import h5py

        versions["hdf5"] = h5py.version.hdf5_version
        versions["h5py_ros3"] = "ros3" in h5py.registered_drivers()
    except ImportError:
        pass
    return versions


def host_info() -> dict:
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {"machine": _platform.node(), "cpu_count": os.cpu_count(), "loadavg": load,
            "platform": _platform.platform()}


def new_record(**fields) -> dict:
    """A record with every required key; ``fields`` override the defaults."""
    record = {key: None for key in schema()["required"]}
    record.update({
        "schema_version": SCHEMA_VERSION,
        "record_id": uuid.uuid4().hex,
        "status": "ok",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "pattern_params": {},
        "reader_settings": {},
        "repetition": 0,
        "request_counting": "none",
        "counts_source": None,
        "list_requests": None,
        "client_counts": None,
        "proxy_counts": None,
        "versions": library_versions(),
        "host": host_info(),
    })
    record.update(fields)
    return record


def error_record(message: str, **fields) -> dict:
    """An error record: status=error, the one-line reason, no measurements."""
    return new_record(status="error", error=str(message).strip().splitlines()[0] if message else "unknown error",
                      **fields)


def derive_rates(record: dict) -> dict:
    """Fill the ratios that follow from measured fields (rates, over-read, Gbps)."""
    wall, points = record.get("wall_s"), record.get("points")
    needed, moved = record.get("bytes_needed"), record.get("bytes_transferred")
    rss, load = record.get("peak_rss_mb"), record.get("load_s")
    record["points_per_s"] = points / wall if points and wall else None
    record["mib_per_point"] = rss / points if rss and points else None
    record["overread_ratio"] = moved / needed if needed and moved is not None else None
    record["throughput_gbps"] = needed * 8 / load / 1e9 if needed and load else None
    return record


def validate_record(record: dict) -> list[str]:
    """Problems with ``record`` (empty when valid)."""
    try:
        import jsonschema
    except ImportError:
        missing = [k for k in schema()["required"] if k not in record]
        problems = [f"missing key {k!r}" for k in missing]
        if record.get("status") not in ("ok", "error"):
            problems.append(f"bad status {record.get('status')!r}")
        return problems
    validator = jsonschema.Draft202012Validator(schema())
    return [f"{'/'.join(map(str, e.path)) or '<record>'}: {e.message}" for e in validator.iter_errors(record)]
