"""The plan step reads the upload's metadata in a guarded child, as the repack does: a file that
makes the HDF5 library spin is stopped by the stall check and named, instead of holding the
plan task until its timeout."""

from __future__ import annotations

import time

import pytest

from layoutlab import guard
from layoutlab.errors import BadInputFile
from layoutlab.pipeline import planning


def test_a_metadata_read_that_spins_is_stopped_and_names_the_upload(monkeypatch):
    def spin(location):  # what libhdf5 does on the fuzzer's zeroed-heap file: busy, no I/O
        while True:
            pass

    monkeypatch.setattr(planning, "dataset_facts", spin)
    monkeypatch.setattr(guard, "DEFAULT_STALL_SECONDS", 1.0)
    execution = {"dataset_id": "d1", "source": {"bucket": "ingest", "key": "incoming/bad.h5", "version_id": "v7"}}
    started = time.monotonic()
    with pytest.raises(BadInputFile, match="spun") as raised:
        planning.plan_dataset(execution, s3=None, store=None, settings=planning.PlanSettings(outputs_bucket="out"))
    assert "incoming/bad.h5" in str(raised.value)
    assert time.monotonic() - started < 30
