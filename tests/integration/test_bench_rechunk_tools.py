"""benchmarks/bench_rechunk.py's Cubed and codec-floor children on a tiny source: each runs,
checks its output against the generator, and fails when the values are wrong, so the
benchmark's rivals cannot rot silently. Also the tiled real-product source (--source).

Cubed lives in a bench-only venv (`make bench-cubed-venv`, /tmp/zarr/cubed-venv, or
LAYOUTLAB_CUBED_PYTHON): without it the Cubed test is skipped and nothing is installed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from layoutlab.samples.geos import VARIABLE, write_geos
from shared_corpus import CORPUS

REPO = Path(__file__).resolve().parents[2]
SHAPE = (12, 9, 14)
PRODUCTS = CORPUS / "products"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_rechunk", REPO / "benchmarks" / "bench_rechunk.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cubed_python() -> str | None:
    for candidate in (os.environ.get("LAYOUTLAB_CUBED_PYTHON"), "/tmp/zarr/cubed-venv/bin/python", sys.executable):
        if candidate and Path(candidate).exists():
            done = subprocess.run([candidate, "-c", "import cubed, cubed_xarray"], capture_output=True)
            if done.returncode == 0:
                return candidate
    return None


@pytest.fixture
def geos_source(tmp_path):
    path = tmp_path / "geos.nc"
    write_geos(path, shape=SHAPE)
    return path


def _child_args(bench, tmp_path, src, target, shape=SHAPE, dims=("time", "lat", "lon"), var=VARIABLE, tiled=None):
    return {
        "src": str(src), "dst": str(tmp_path / f"out-{target}.zarr"), "tmp": str(tmp_path / f"tmp-{target}"),
        "chunks": bench.targets_for(shape, dims)[target], "max_mem": 64 * 2**20, "var": var, "dims": list(dims),
        "shape": list(shape), "geos_module": str(Path(sys.modules["layoutlab.samples.geos"].__file__)),
        "tiled": tiled,
    }


def _spoil_check_point(src, var=VARIABLE):
    """Change the value the children's check reads at time 0 (the first map and the series)."""
    with h5py.File(src, "r+") as f:
        ds = f[var]
        _, la, lo = ds.shape
        ds[0, la // 3, lo // 2] = ds[0, la // 3, lo // 2] + 1


@pytest.mark.parametrize("target", ["time-series", "map", "balanced"])
def test_codec_floor_encodes_every_target_chunk_once_and_checks_its_values(tmp_path, geos_source, target):
    bench = _bench()
    args = _child_args(bench, tmp_path, geos_source, target)
    result = bench.run_child("floor", sys.executable, max(os.sched_getaffinity(0)), args, tmp_path)
    assert "error" not in result, result.get("stderr_tail")
    chunks = [args["chunks"][d] for d in args["dims"]]
    expected_chunks = int(np.prod([-(-n // c) for n, c in zip(SHAPE, chunks)]))
    assert result["target_chunks_encoded"] == expected_chunks
    assert result["seconds"] == pytest.approx(result["decode_seconds"] + result["encode_seconds"])
    assert result["decode_seconds"] > 0 and result["encode_seconds"] > 0
    assert not Path(args["tmp"]).exists(), "the floor's scratch file was left behind"
    if target != "time-series":
        return  # (one spoiled run shows the check bites; each child costs seconds of imports)
    _spoil_check_point(geos_source)
    spoiled = bench.run_child("floor", sys.executable, max(os.sched_getaffinity(0)), args, tmp_path)
    assert "error" in spoiled and "Arrays are not equal" in spoiled["stderr_tail"]


def test_cubed_rechunks_to_the_target_chunks_and_checks_its_values(tmp_path, geos_source):
    cubed_python = _cubed_python()
    if cubed_python is None:
        pytest.skip("cubed + cubed-xarray are not importable (bench-only: `make bench-cubed-venv` builds "
                    "/tmp/zarr/cubed-venv, or set LAYOUTLAB_CUBED_PYTHON)")
    import zarr

    bench = _bench()
    args = _child_args(bench, tmp_path, geos_source, "balanced")
    result = bench.run_child("cubed", cubed_python, max(os.sched_getaffinity(0)), args, tmp_path)
    assert "error" not in result, result.get("stderr_tail")
    assert result["cubed"]
    stored = zarr.open_group(args["dst"], mode="r")[VARIABLE]
    assert stored.chunks == tuple(args["chunks"][d] for d in args["dims"])
    assert stored.metadata.zarr_format == 3

    _spoil_check_point(geos_source)
    spoiled = bench.run_child("cubed", cubed_python, max(os.sched_getaffinity(0)), args, tmp_path)
    assert "error" in spoiled and "Arrays are not equal" in spoiled["stderr_tail"]


@pytest.mark.skipif(not (PRODUCTS / "M2T1NXSLV_geo_temporal.nc4").exists(), reason="the corpus's MERRA-2 file is absent")
def test_a_real_variable_tiled_along_its_record_axis_keeps_its_chunks_and_filters(tmp_path):
    bench = _bench()
    original_file = PRODUCTS / "M2T1NXSLV_geo_temporal.nc4"
    src, source = bench.write_tiled_source(tmp_path, f"{original_file}:PS", target_mib=0.05)
    with h5py.File(original_file, "r") as f:
        original = f["PS"]
        values, chunks, compression, level = original[()], original.chunks, original.compression, original.compression_opts
    with h5py.File(src, "r") as f:
        tiled = f["PS"]
        assert tiled.chunks == chunks and tiled.compression == compression and tiled.compression_opts == level
        assert tiled.shape[0] > values.shape[0] and tiled.shape[0] % chunks[0] == 0
        np.testing.assert_array_equal(tiled[values.shape[0]: 2 * values.shape[0]], values)
    assert source["dims"][0] == "time"

    # the floor decodes its deflate chunks and checks the tiled values
    args = _child_args(bench, tmp_path, src, "time-series", shape=tuple(source["shape"]), dims=tuple(source["dims"]),
                       var="PS", tiled=source["tiled"])
    result = bench.run_child("floor", sys.executable, max(os.sched_getaffinity(0)), args, tmp_path)
    assert "error" not in result, result.get("stderr_tail")


@pytest.mark.skipif(not (PRODUCTS / "era5_1995-07-14T12.nc").exists(), reason="the corpus's ERA5 file is absent")
def test_a_map_without_record_axis_gets_one_record_per_chunk(tmp_path):
    bench = _bench()
    src, source = bench.write_tiled_source(tmp_path, f"{PRODUCTS / 'era5_1995-07-14T12.nc'}:t2m_C", target_mib=0.5)
    with h5py.File(src, "r") as f:
        assert f["t2m_C"].chunks == (1, 105, 237)
        assert f["t2m_C"].shape == (source["shape"][0], 105, 237)
    assert source["dims"] == ["time", "latitude", "longitude"]
    with pytest.raises(SystemExit, match="no variable nope"):
        bench.write_tiled_source(tmp_path, f"{PRODUCTS / 'era5_1995-07-14T12.nc'}:nope", target_mib=0.5)
