"""Hostile inputs (issue 23): what an attacker can upload, and what each attack gets.

Each attack has a generator here and runs against the CLI and through the local pipeline (upload
into the ingest bucket, deliver the event, let the state machine run). A refusal is one line that
names the object (the S3 key in the pipeline) and the reason, recorded as a FAILURE item; nothing
crashes, nothing runs unbounded, nothing is left in the outputs bucket.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from layoutlab.local import dispatch
from layoutlab.local.pipeline import LocalPipeline
from layoutlab.samples import geos

# =================================================================================================
# Plans, keys and declared sizes (issue 23 rows 4, 5, 11 and 12): every plan has a cost ceiling
# before anything runs, any JSON value as a plan is refused naming the field, keys the readers
# cannot address are refused at ingest, and a conversion weighs the shapes a file declares before
# it writes a byte.
# =================================================================================================

# A trillion float32 elements declared in a file of a few kilobytes: nothing is written, every
# element reads as the fill value, and a conversion that trusts the shape never ends.
TRILLION = (100_000, 1_000, 10_000)


def declared_grid(path: Path, shape: tuple[int, int, int] = TRILLION) -> Path:
    """A NetCDF-4 (time, lat, lon) grid that declares ``shape`` and stores none of it."""
    import netCDF4

    with netCDF4.Dataset(path, "w") as nc:
        for name, size in zip(("time", "lat", "lon"), shape):
            nc.createDimension(name, size)
            nc.createVariable(name, "f8", (name,))
        var = nc.createVariable("T", "f4", ("time", "lat", "lon"), chunksizes=tuple(min(100, n) for n in shape),
                                fill_value=1.5)
        var.units = "K"
    return path


def rechunk_variant(chunks) -> dict:
    return {"kind": "rechunk-zarr", "chunks": chunks}


# name -> (the plan's JSON value, what the refusal must say). The plans are partial (their keys
# replace the default plan's), as users store them under plans/.
HOSTILE_PLANS = {
    "null": (None, "a plan must be a JSON object of the fields in docs/pipeline-and-plans.md, got null"),
    "array": ([1, 2], "a plan must be a JSON object of the fields in docs/pipeline-and-plans.md, got an array"),
    "variant-string": ({"variants": ["original"]}, "variants[0]: 'original' is not of type 'object'"),
    "chunk-text": ({"variants": [rechunk_variant({"time": "abc"})]},
                   "variants[0].chunks.time: 'abc' is not of type 'integer'"),
    "chunk-negative": ({"variants": [rechunk_variant({"time": -5})]},
                       "variants[0].chunks.time: -5 is less than the minimum of 1"),
    "chunk-one-element": ({"variants": [rechunk_variant([1, 1, 1])]},
                          "variants[0].chunks: a chunk of 1 is under this environment's minimum min_chunk_elements"),
    "scaling-1000-workers": ({"scaling": {"workers": [1000] * 5}},
                             "scaling.workers: a study of 1,000 is over this environment's ceiling max_scaling_workers"),
    "scaling-x100-repetitions": ({"scaling": {"workers": [1000]}, "repetitions": 100},
                                 "repetitions: asks for 100 is over this environment's ceiling max_repetitions"),
    "cases": ({"scaling": {"workers": [60] * 20}},
              "cases: up to 186,424 is over this environment's ceiling max_cases"),
    "page-1GiB": ({"variants": [{"kind": "repack-paged", "page_size": "1GiB"}]},
                  "variants[0].page_size: 1GiB = 1,073,741,824 is over this environment's ceiling "
                  "max_page_size_input_ratio x the input = 8,388,608"),
    "17-variants": ({"variants": [rechunk_variant([i + 1, 10, 10]) for i in range(17)]},
                    "variants: a count of 17 is over this environment's ceiling max_variants = 16"),
    "unknown-field": ({"repetitons": 2}, "repetitons: unknown field; known: name, description, variants"),
}

# key -> what the refusal must say. Readers' HTTP clients resolve dot segments (RFC 3986), and
# s3fs takes the first '?versionId=' of a path as a version: neither key can be read as itself.
HOSTILE_KEYS = {
    "incoming/../escape.nc": "the key has a '..' segment, which the readers' HTTP clients resolve away",
    "incoming/./dot.nc": "the key has a '.' segment",
    "incoming/a?versionId=b.nc": "the key holds '?versionId=', which s3fs (the HDF5 readers' S3 client) reads",
}


def run_cli(*args, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "layoutlab.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_cli_rechunk_refuses_a_file_declaring_a_trillion_elements_before_writing(tmp_path):
    source = declared_grid(tmp_path / "declared.nc")
    assert source.stat().st_size < 64 * 1024  # a few kilobytes declaring 4 TB
    target = tmp_path / "out.zarr"
    started = time.monotonic()
    done = run_cli("rechunk", source, target, "--no-progress", "--chunks", "time=1")
    assert time.monotonic() - started < 60  # before the fix: chunk after chunk until killed
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{source}: T (100000x1000x10000 of 4-byte items) brings the copy to " in lines[0]
    assert "over this environment's" in lines[0]
    assert not target.exists()  # nothing written, not even the plan


def test_cli_rechunk_names_the_byte_bound_of_the_environment(tmp_path):
    """The same ceilings the pipeline gets (LAYOUTLAB_CEILINGS) bound the CLI; over bytes, the message says
    how the bound was made from the input's size."""
    source = declared_grid(tmp_path / "declared.nc", shape=(1_000, 100, 1_000))  # 400 MB declared
    ceilings = json.dumps({"max_variant_bytes": 10**8})
    done = run_cli("rechunk", source, tmp_path / "out.zarr", "--no-progress", "--chunks", "time=100",
                   env={"LAYOUTLAB_CEILINGS": ceilings})
    assert done.returncode == 2, done.stderr
    # 400,000,000 bytes of T and 16,800 of its three coordinates
    assert "T (1000x100x1000 of 4-byte items) brings the copy to 400,016,800 bytes uncompressed" in done.stderr
    assert "over this environment's bound of 100,000,000 bytes (ceiling max_variant_bytes" in done.stderr
    # within the ceilings, the same file rechunks (every element the fill value)
    small = declared_grid(tmp_path / "small.nc", shape=(10, 10, 10))
    assert run_cli("rechunk", small, tmp_path / "small.zarr", "--no-progress").returncode == 0


@pytest.fixture(scope="module")
def hostile_run(local_cloud, tmp_path_factory):
    """One local pipeline: every hostile plan and key delivered, and two uploads of the trillion-element
    grid let run (the default plan, and a plan whose one rechunk passes the plan step)."""
    work = tmp_path_factory.mktemp("hostile")
    sample = geos.write_geos(work / "sample.nc", shape=(24, 19, 36))
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    outcomes = {}
    for name, (plan, _) in HOSTILE_PLANS.items():
        pipeline.s3.put_object(Bucket=dispatch.INGEST_BUCKET, Key=f"plans/{name}.json", Body=json.dumps(plan).encode())
        [outcomes[name]] = pipeline.deliver(pipeline.upload(sample, key=f"incoming/plan-{name}.nc", plan=name))
    for key in HOSTILE_KEYS:
        [outcomes[key]] = pipeline.deliver(pipeline.upload(sample, key=key))
    declared = declared_grid(work / "declared.nc")
    # the map-shaped rechunk makes 100,000 objects (under dev's 200,000): the plan step lets it through
    # and the conversion must weigh the 4 TB the file declares
    # (one cheap pattern: the original's cases read what the file declares too, all of it the fill value)
    pipeline.put_plan("one-rechunk", {"variants": [{"kind": "original"}, rechunk_variant("map")],
                                      "patterns": {"grid": ["timeseries-point"], "granule": []},
                                      "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"]},
                                      "platforms": ["local-lambda"], "repetitions": 1})
    for key, plan in (("incoming/declared-default.nc", None), ("incoming/declared-map.nc", "one-rechunk")):
        [outcomes[key]] = pipeline.deliver(pipeline.upload(declared, key=key, plan=plan))
    started = [outcomes[k] for k in ("incoming/declared-default.nc", "incoming/declared-map.nc")]
    final = pipeline.wait(started, timeout=600)
    try:
        yield pipeline, outcomes, final
    finally:
        local_cloud.reset()


def failures(pipeline, outcome) -> list[dict]:
    return pipeline.store.items(dataset=outcome["dataset_id"], kind="FAILURE")


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE_PLANS)
def test_pipeline_refuses_each_hostile_plan_at_ingest_naming_the_field(hostile_run, name):
    pipeline, outcomes, _ = hostile_run
    outcome, expected = outcomes[name], HOSTILE_PLANS[name][1]
    assert outcome["status"] == "rejected", outcome
    assert outcome["reason"].startswith(f"s3://{dispatch.INGEST_BUCKET}/incoming/plan-{name}.nc: plan '{name}'")
    assert expected in outcome["reason"]
    [failure] = failures(pipeline, outcome)
    assert failure["stage"] == "ingest" and expected in failure["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_pipeline_refuses_keys_the_readers_cannot_address(hostile_run, key):
    pipeline, outcomes, _ = hostile_run
    outcome = outcomes[key]
    assert outcome["status"] == "rejected", outcome
    assert outcome["reason"].startswith(f"s3://{dispatch.INGEST_BUCKET}/{key}: {HOSTILE_KEYS[key]}")
    [failure] = failures(pipeline, outcome)
    assert HOSTILE_KEYS[key] in failure["reason"]


@pytest.mark.slow
def test_pipeline_refuses_a_trillion_declared_elements_before_converting(hostile_run):
    pipeline, outcomes, final = hostile_run
    default, one_rechunk = outcomes["incoming/declared-default.nc"], outcomes["incoming/declared-map.nc"]
    assert default["status"] == one_rechunk["status"] == "started"  # a few KB: ingest cannot know the shapes
    assert final[default["dataset_id"]] == "FAILED"
    # the default plan's balanced rechunk: refused by the plan step, from the grid's shape, before any conversion
    [failure] = failures(pipeline, default)
    assert failure["stage"] == "plan", failure
    # (the plan an upload naming none runs: the local cloud's plans/local.json, the packaged default in AWS)
    assert "plan 'local': variant zarr-" in failure["reason"] or "plan 'default': variant zarr-" in failure["reason"]
    assert "is over this environment's ceiling max_objects_per_variant = 200,000" in failure["reason"]
    # the map-shaped one passes the plan step; the conversion weighs the declared bytes and writes nothing:
    # that variant fails, the run goes on with the original
    assert final[one_rechunk["dataset_id"]] == "SUCCEEDED"
    errors = " ".join(f["reason"] for f in failures(pipeline, one_rechunk))
    assert f"s3://{dispatch.INGEST_BUCKET}/incoming/declared-map.nc: T (100000x1000x10000 of 4-byte items) " \
           "brings the copy to" in errors
    assert "bytes uncompressed from the shapes the file declares" in errors and "/tmp/" not in errors
    written = pipeline.s3.list_objects_v2(Bucket=dispatch.OUTPUTS_BUCKET, Prefix="variants/").get("KeyCount", 0)
    assert written == 0  # before the fix: 11,095 chunk objects and no metadata
