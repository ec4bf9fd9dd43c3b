"""Issue 16's two benchmark scripts at a tiny size: every row measured, every value checked.

benchmarks/bench_nsidc_table.py (NSIDC's ATL03 table) on a ~30 MB granule and
benchmarks/bench_grid_shards.py (grid layouts, shard coalescing on/off) on a 48 x 19 x 36 grid,
one repetition each, run as a user runs them (a subprocess, own local cloud). Their JSON must
hold every row of the table with values equal to the generator's, and what they generated must
be gone afterwards; bad options end with a one-line error naming the option.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NSIDC_ROWS = {"h5py-default-original", "h5py-aligned-rechunked-paged", "kerchunk-original",
              "kerchunk-rechunked-paged", "h5coro-original", "xarray-tuned", "xarray-naive"}
GRID_PATTERNS = {"timeseries-point", "map-timestep", "timeseries-region-mean", "map-time-mean"}


def _run(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_nsidc_table_measures_every_column_and_each_mean_equals_the_source(tmp_path):
    out = tmp_path / "nsidc.json"
    done = _run("bench_nsidc_table.py", "--sizes", "30MB", "--repeat", "1", "--workdir", str(tmp_path / "work"),
                "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    size = result["sizes"]["30MB"]
    rows = {row["key"]: row for row in size["rows"]}
    assert set(rows) == NSIDC_ROWS
    for key, row in rows.items():
        assert row["ok_runs"] == row["runs"] == 1, (key, row.get("errors"))
        assert row["values_ok"] and row["mean_equals_source"], (key, row["means"], size["facts"]["source_mean"])
        assert row["requests"] > 0 and row["bytes_transferred"] > 0, key
        assert row["ratio_to_best"] >= 1.0 and row["why"], key
    assert min(row["ratio_to_best"] for row in rows.values()) == 1.0
    # the rechunked copy has NSIDC's 100,000-photon chunks and 8 MiB pages; references copy no chunk
    conversions = size["facts"]["conversions"]
    assert conversions["rechunked-paged-8MiB"]["bytes"] % (8 * 2**20) == 0
    assert conversions["kerchunk-original"]["bytes"] < size["facts"]["file_bytes"]["original"] / 2
    # h5coro is measured on the original; on the paged copy it fails, and the record says why
    assert size["h5coro_on_rechunked_paged"]["status"] == "error"
    assert "superblock" in size["h5coro_on_rechunked_paged"]["error"]
    for row in NSIDC_ROWS - {"xarray-naive"}:  # (the 1 GB column has no naive xarray time)
        assert rows[row]["published_ratio"], row
    assert result["settings"]["smoke"] is True
    printed = done.stdout
    assert "kerchunk over rechunked + paged" in printed and "why (measured counts" in printed
    assert not list((tmp_path / "work").glob("*.h5")), "generated granules left behind without --keep"


def test_grid_shards_reads_every_variant_with_every_pattern_and_compares_coalescing(tmp_path):
    out = tmp_path / "grid.json"
    done = _run("bench_grid_shards.py", "--shape", "48,19,36", "--repeat", "1", "--workdir",
                str(tmp_path / "work"), "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    cases = result["cases"]
    assert {c["pattern"] for c in cases} == GRID_PATTERNS
    sharded = [v["name"] for v in result["settings"]["sharded"]]
    assert len(sharded) == 2  # the default splits 8,2,2 and 32,2,2
    native, icechunk = "zarr-48x19x36", "icechunk-48x19x36"
    expected = {(native, "zarr-obstore"), (icechunk, "icechunk"), ("kerchunk-original", "kerchunk-fsspec")}
    expected |= {(name, reader) for name in sharded for reader in ("zarr-obstore", "zarr-obstore-nocoalesce")}
    assert {(c["variant"], c["reader"]) for c in cases} == expected
    assert len(cases) == len(expected) * len(GRID_PATTERNS)
    bad = [(c["key"], c.get("errors")) for c in cases if not (c["ok_runs"] == 1 and c["values_ok"])]
    assert not bad
    assert set(result["coalescing"]) == set(sharded)
    for name in sharded:
        assert set(result["coalescing"][name]) == GRID_PATTERNS
        point = result["coalescing"][name]["timeseries-point"]
        # a point's time series crosses several inner chunks of its shard: coalescing merges their GETs
        assert point["requests_on"] < point["requests_off"], (name, point)
        assert point["speedup"] > 0 and point["reason"] and isinstance(point["met"], bool)
    assert isinstance(result["verdict"]["coalescing_met"], bool)
    conversions = result["conversions"]
    assert len(conversions) == 5 and all(c["bytes"] > 0 and c["seconds"] > 0 for c in conversions.values())
    assert not list((tmp_path / "work").glob("*.nc")), "generated grid left behind without --keep"


@pytest.mark.parametrize("script, args, named", [
    ("bench_nsidc_table.py", ["--sizes", "1XB"], "--sizes"),
    ("bench_grid_shards.py", ["--shape", "48,19"], "--shape"),
    ("bench_grid_shards.py", ["--shard-split", "8,0,2"], "--shard-split"),
])
def test_bad_options_end_with_one_line_naming_the_option(tmp_path, script, args, named):
    done = _run(script, *args, "--workdir", str(tmp_path), "--json", str(tmp_path / "x.json"), timeout=120)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert named in last and "Traceback" not in done.stderr
    assert not (tmp_path / "x.json").exists()
