"""The summary's check of any file's values: each case's digest against the original's for the same case."""

from __future__ import annotations

from layoutlab.pipeline.outcomes import about_variables
from layoutlab.pipeline.values_check import check_against_original
from layoutlab.report.decision import measured


def _result(variant, reader, digest, pattern="box", params=None, **extra):
    return {"kind": "RESULT", "status": "ok", "platform": "local-lambda", "variant": variant, "reader": reader,
            "pattern": pattern, "pattern_params": params or {"variable": "t2m"}, "checksum_ok": None,
            "result_summary": {"values_sha256": digest} if digest else {}, **extra}


def test_equal_digests_check_out_and_the_sentence_says_every_value():
    results = [_result("original", "h5py-s3fs-aligned", "a"), _result("paged-1MiB", "h5py-s3fs-aligned", "a"),
               _result("original", "h5py-s3fs-aligned", None, pattern="open-list", params={})]
    check = check_against_original(results)
    assert (check["checked"], check["equal"], check["mismatches"]) == (2, 2, [])
    assert check["sentence"] == "Every value read (2 cases) was checked equal to the original's."
    assert [r["checksum_ok"] for r in results] == [True, True, None]


def test_a_variant_reading_other_values_is_a_visible_failed_check_never_ranked():
    results = [_result("original", "h5py-s3fs-aligned", "a"), _result("paged-1MiB", "h5py-s3fs-aligned", "b"),
               _result("zarr-x", "zarr-python", "a", params={"variable": "t2m", "index": [1]})]
    check = check_against_original(results)
    assert check["checked"] == 2 and check["equal"] == 1 and check["unchecked"] == 1
    assert check["mismatches"] == [{"variant": "paged-1MiB", "reader": "h5py-s3fs-aligned", "pattern": "box",
                                    "platform": "local-lambda", "reference_reader": "h5py-s3fs-aligned"}]
    assert check["sentence"].startswith("1 of 2 cases read values different from the original's")
    assert not measured(results[1]) and measured(results[0])


def test_h5pys_read_of_the_original_is_the_reference_over_another_original_reader():
    results = [_result("original", "kerchunk-fsspec", "wrong"), _result("original", "h5py-s3fs-default", "a"),
               _result("paged-1MiB", "h5py-s3fs-aligned", "a")]
    check = check_against_original(results)
    assert [m["reader"] for m in check["mismatches"]] == ["kerchunk-fsspec"]
    assert results[2]["checksum_ok"] is True


def test_regenerated_checks_of_the_samples_are_left_alone():
    results = [_result("original", "h5py-s3fs-aligned", "a"), _result("paged-1MiB", "h5py", "b", checksum_ok=True)]
    results[1]["checksum_ok"] = True
    check_against_original(results)
    assert results[1]["checksum_ok"] is True


def test_the_recommendation_names_the_variables_by_role():
    run = {"family_cases": [
        {"label": "open-list", "role": "grid", "variable": "(every object)", "why": ""},
        {"label": "variable-read", "role": "grid", "variable": "t2m", "why": ""},
        {"label": "multi-variable", "role": "grid", "variable": "t2m, d2m", "why": ""},
        {"label": "column-read", "role": "table", "variable": "gt1l/h_li", "why": ""}]}
    about = about_variables(run)
    assert about["by_pattern"]["multi-variable"] == "t2m, d2m" and "open-list" not in about["by_pattern"]
    assert about["sentence"] == "the grid t2m, d2m; the table gt1l/h_li"
    assert about_variables({})["sentence"] is None


def test_xarrays_decoded_values_are_compared_with_xarrays_read_of_the_original():
    results = [_result("original", "h5py-s3fs-aligned", "raw"), _result("original", "xarray-h5netcdf", "scaled"),
               _result("paged-1MiB", "xarray-h5netcdf", "scaled"), _result("paged-1MiB", "h5py-s3fs-aligned", "raw")]
    check = check_against_original(results)
    assert (check["checked"], check["equal"]) == (4, 4)
    results.append(_result("paged-1MiB", "xarray-h5netcdf", "raw", repetition=1))
    assert check_against_original(results)["mismatches"][0]["reader"] == "xarray-h5netcdf"


def _packed(variant, reader, digest, stored, dtypes):
    record = _result(variant, reader, digest)
    record["result_summary"].update({"values_stored_sha256": stored, "values_dtypes": dtypes})
    return record


def test_the_same_packed_integers_decoded_at_another_precision_are_equal_and_named():
    results = [_packed("original", "xarray-h5netcdf", "f32", "ints", ["float32"]),
               _packed("zarr-rows100", "xarray-zarr", "f64", "ints", ["float64"]),
               _packed("icechunk-virtual", "xarray-icechunk", "f64", "other ints", ["float64"])]
    check = check_against_original(results)
    assert [r["checksum_ok"] for r in results] == [True, True, False]
    assert [m["variant"] for m in check["mismatches"]] == ["icechunk-virtual"]
    assert [p["variant"] for p in check["precision"]] == ["zarr-rows100"]
    assert ("decode the same stored integers at another precision: xarray-zarr on zarr-rows100 (float64 where "
            "the original gives float32)") in check["sentence"]


# Run in a new interpreter: zarr's event-loop thread left in this test process would make a later test's forked
# worker that uses zarr wait forever for a loop that has no thread in the fork.
PACKED_SCRIPT = """
import json, sys
import numpy as np, xarray as xr
from layoutlab.bench.patterns import values_digest
from layoutlab.bench.readers import _XarrayArray
tmp = sys.argv[1]
rng = np.random.default_rng(3)
raw = rng.integers(-32000, 32000, 5000).astype("i2")
raw[7] = -1
attrs = {"scale_factor": np.float32(0.0022), "add_offset": np.float32(16.0), "_FillValue": np.int16(-1)}
xr.Dataset({"lat": ("n", raw, attrs)}).to_netcdf(tmp + "/orig.nc", engine="h5netcdf")
original = xr.open_dataset(tmp + "/orig.nc", engine="h5netcdf")
xr.open_dataset(tmp + "/orig.nc", engine="h5netcdf", mask_and_scale=False).to_zarr(tmp + "/copy.zarr", zarr_format=3)
copy = xr.open_zarr(tmp + "/copy.zarr", consolidated=False)
a, b = _XarrayArray(original["lat"]), _XarrayArray(copy["lat"])
got_a, got_b = a[:], b[:]
changed = got_b.copy()
changed[100] += 0.0022
print(json.dumps({"dtypes": [str(got_a.dtype), str(got_b.dtype)],
                  "decoded": [values_digest([got_a]), values_digest([got_b])],
                  "stored": [values_digest([a.as_stored(got_a)]), values_digest([b.as_stored(got_b)]),
                             values_digest([b.as_stored(changed)])],
                  "fill_kept": bool(np.isnan(a.as_stored(got_a)[7]))}))
"""


def test_xarray_packs_back_the_same_integers_from_a_netcdf_original_and_its_zarr_copy(tmp_path):
    """GOES GLM's event_lat: int16 with float32 scale_factor / add_offset. xarray decodes the HDF5 original to
    float32 and a Zarr copy (JSON attributes) to float64: the decoded digests differ, the packed-back ones not;
    one integer changed in the copy changes them."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", PACKED_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["dtypes"] == ["float32", "float64"]
    assert out["decoded"][0] != out["decoded"][1]
    assert out["stored"][0] == out["stored"][1] != out["stored"][2]
    assert out["fill_kept"]
