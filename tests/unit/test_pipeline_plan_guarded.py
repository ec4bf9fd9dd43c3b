"""The plan step reads the upload's metadata in a guarded child, as the repack does: a file that
makes the HDF5 library spin is stopped by the stall check and named, instead of holding the
plan task until its timeout."""

from __future__ import annotations

import time

import pytest

from layoutlab import guard
from layoutlab.errors import BadInputFile
from layoutlab.pipeline import planning
from layoutlab.pipeline.payloads import ExecutionInput


def test_a_metadata_read_that_spins_is_stopped_and_names_the_upload(monkeypatch):
    def spin(location, plan=None, counter=None):  # what libhdf5 does on the fuzzer's zeroed-heap file: busy, no I/O
        while True:
            pass

    monkeypatch.setattr(planning, "dataset_facts", spin)
    monkeypatch.setattr(guard, "DEFAULT_STALL_SECONDS", 1.0)
    execution = {"dataset_id": "d1", "source": {"bucket": "ingest", "key": "incoming/bad.h5", "version_id": "v7"}}
    started = time.monotonic()
    with pytest.raises(BadInputFile, match="spun") as raised:
        planning.plan_dataset(ExecutionInput.from_event(execution), s3=None, store=None, settings=planning.PlanSettings(outputs_bucket="out"))
    assert "incoming/bad.h5" in str(raised.value)
    assert time.monotonic() - started < 30


def test_the_plan_step_refuses_a_case_reading_terabytes_before_recording_or_converting_anything(monkeypatch):
    """A few kilobytes declaring a (10^5, 10^3, 10^4) float grid: the default plan's full read is 4 TB per
    case. Refused naming the pattern, the estimate and the ceiling, before the store or S3 is touched
    (both are None here: any use of them would raise something else)."""
    from layoutlab.pipeline.plan import DatasetFacts, PlanError

    huge = DatasetFacts(kind="grid", grid_shape=(100_000, 1_000, 10_000), variable="T")
    monkeypatch.setattr(planning, "dataset_facts", lambda location, plan=None, counter=None: huge)
    execution = {"dataset_id": "d1", "source": {"bucket": "ingest", "key": "incoming/declared.nc", "version_id": "v1",
                                                "size": 24_000},
                 "plan": {"name": "big", "variants": [{"kind": "original"}], "patterns": ["full-read-throughput"]}}
    with pytest.raises(PlanError) as raised:
        planning.plan_dataset(ExecutionInput.from_event(execution), s3=None, store=None,
                              settings=planning.PlanSettings(outputs_bucket="out"))
    assert str(raised.value).startswith("plan 'big': patterns: full-read-throughput: a case reads all of the declared "
                                        "100000x1000x10000 grid of 4-byte items: 4,000,000,000,000 is over this "
                                        "environment's ceiling max_case_read_bytes")
