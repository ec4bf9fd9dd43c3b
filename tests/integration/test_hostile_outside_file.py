"""Hostile inputs (issue 23, rows 1-3): an uploaded HDF5 file never reaches outside itself.

A file can name other files of the machine that opens it: external raw storage (here the
process's own environment, ``/proc/self/environ``, where a cloud task holds its credentials, or
a local file), a virtual dataset whose source is a local file, an external link. Each is run
through the CLI (``rechunk``, ``repack``, ``inspect``) and through the local pipeline (every
variant kind), with a canary in the environment and in a local file; every output is then read
back (raw bytes, every Zarr/HDF5 array decoded, kerchunk's inline data decoded) and must hold no
canary, while the file's ordinary variable is converted and the hostile one is named as skipped.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from hostile_files import (ENV_CANARY, ENV_CANARY_NAME, ENVIRON_BYTES, FILE_CANARY, every_hostile_file, leaks, leaks_under,
                           plant_local_secrets)
from repack_helpers import run_layoutlab

pytestmark = pytest.mark.slow


def _decoded_zarr_leaks(root: Path) -> list[str]:
    """Canaries in the decoded values of every array of the Zarr hierarchy at ``root``."""
    import zarr

    found = []
    group = zarr.open_group(zarr.storage.LocalStore(root, read_only=True), mode="r")
    for name, array in group.arrays():
        values = np.asarray(array[...])
        found += [f"{name}: {hit}" for hit in leaks(values.astype(str).tobytes() if values.dtype.kind in "OUT"
                                                   else values.tobytes())]
    for name, sub in group.groups():
        found += [f"{name}/{hit}" for hit in _decoded_zarr_leaks(root / name)]
    return found


def _decoded_hdf5_leaks(path: Path) -> list[str]:
    """Canaries in the values of every dataset of an HDF5 output whose values are stored in it."""
    from layoutlab.hdf5_input import data_outside_file, open_input

    found = []
    with open_input(path) as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.shape and data_outside_file(obj) is None:
                found.extend(f"{name}: {hit}" for hit in leaks(np.asarray(obj[()]).tobytes()))
        f.visititems(visit)
    return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile")
    secrets = plant_local_secrets(work / "secrets")
    return every_hostile_file(work / "files", secrets)


@pytest.mark.parametrize("attack", ["external-environ", "external-environ-relative", "external-local-file",
                                    "virtual-local-file", "external-link-local-file",
                                    # issue 36: a virtual dataset over "." (the file itself) that reads outside
                                    "virtual-self-external-environ", "virtual-self-external-file",
                                    "virtual-self-external-link", "virtual-self-nested"])
def test_rechunk_never_copies_what_lies_outside_the_file(hostile, attack, tmp_path):
    out = tmp_path / "out.zarr"
    code, stdout, stderr, _ = run_layoutlab("rechunk", hostile[attack], out, "--no-progress",
                                            env={ENV_CANARY_NAME: ENV_CANARY})
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert leaks_under(out) == {} and _decoded_zarr_leaks(out) == []
    assert not leaks(stdout.encode() + stderr.encode())
    # the ordinary variable is converted; the hostile one is named as skipped, with the reason
    import zarr

    root = zarr.open_group(zarr.storage.LocalStore(out, read_only=True), mode="r")
    assert np.array_equal(root["temperature"][...], np.arange(24, dtype="f4").reshape(2, 3, 4))
    assert "notes" not in root
    skipped = json.loads(stdout)["skipped"]
    assert [s["variable"] for s in skipped if s.get("variable") in ("notes", "/notes")], skipped
    reasons = " ".join(s["reason"] for s in skipped)
    assert "not read" in reasons or "not followed" in reasons, skipped


@pytest.mark.parametrize("attack", ["external-environ", "external-local-file", "virtual-local-file",
                                    "external-link-local-file", "virtual-self-external-environ",
                                    "virtual-self-external-file", "virtual-self-external-link"])
def test_inspect_and_repack_never_read_what_lies_outside_the_file(hostile, attack, tmp_path):
    env = {ENV_CANARY_NAME: ENV_CANARY}
    code, stdout, stderr, _ = run_layoutlab("inspect", hostile[attack], "--json", env=env)
    assert "Traceback" not in stderr
    assert not leaks(stdout.encode() + stderr.encode())
    out = tmp_path / "paged.h5"
    code, stdout, stderr, _ = run_layoutlab("repack", hostile[attack], out, "--page-size", "64KiB", env=env)
    assert "Traceback" not in stderr
    assert not leaks(stdout.encode() + stderr.encode())
    if out.exists():
        assert leaks(out.read_bytes()) == []
        assert _decoded_hdf5_leaks(out) == []


def test_the_canaries_are_found_where_they_are(hostile, tmp_path):
    """The scan can fail: read without the guard, the hostile datasets hold the canaries."""
    import os

    os.environ[ENV_CANARY_NAME] = ENV_CANARY  # (only in this test process; restored below)
    try:
        with h5py.File(hostile["external-environ"], "r") as f:
            environ = f["notes"][()].tobytes()
        with h5py.File(hostile["external-local-file"], "r") as f:
            local = f["notes"][()].tobytes()
    finally:
        os.environ.pop(ENV_CANARY_NAME)
    assert leaks(environ) and FILE_CANARY in local
    payload = tmp_path / "probe"
    payload.write_bytes(base64.b64encode(b"x") + local)
    assert leaks_under(tmp_path)


# -- through the local pipeline: every variant kind -------------------------------------------------------------
PLAN = {
    "name": "hostile",
    "variants": [
        {"kind": "original"},
        {"kind": "repack-paged", "page_size": "64KiB"},
        {"kind": "rechunk-zarr", "chunks": {"time": 2, "lat": 5, "lon": 6}, "applies_to": "grid"},
        {"kind": "icechunk", "chunks": {"time": 2, "lat": 5, "lon": 6}, "applies_to": "grid"},
        {"kind": "virtual-kerchunk"},
        {"kind": "icechunk-virtual"},
    ],
    "patterns": {"grid": ["timeseries-point"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"], "kerchunk": ["kerchunk-fsspec"],
                "icechunk": ["icechunk"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 1,
}


def _hostile_grid(path: Path, secrets: dict[str, Path]) -> Path:
    """A GEOS-like grid with the four hostile objects added beside its variables."""
    import os

    from layoutlab.samples import geos

    geos.write_geos(path, shape=(4, 10, 12))
    n = len(FILE_CANARY) * 4
    with h5py.File(path, "a") as f:
        f.create_dataset("environ", shape=(ENVIRON_BYTES,), dtype="u1",
                         external=[("/proc/self/environ", 0, ENVIRON_BYTES)])
        f["environ"].attrs["_FillValue"] = "abc"  # VirtualiZarr refuses it: the dataset would be inlined
        f.create_dataset("localfile", shape=(n,), dtype="u1", external=[(os.fspath(secrets["text"]), 0, n)])
        layout = h5py.VirtualLayout(shape=(n,), dtype="u1")
        layout[:] = h5py.VirtualSource(os.fspath(secrets["hdf5"]), "secret", shape=(n,))
        f.create_virtual_dataset("vds", layout, fillvalue=0)
        f["elink"] = h5py.ExternalLink(os.fspath(secrets["hdf5"]), "/secret")
        # issue 36: virtual datasets over "." (the file itself): over the external-storage dataset above and
        # over the external link (HDF5 resolves a virtual dataset's source with its own link access)
        self_environ = h5py.VirtualLayout(shape=(ENVIRON_BYTES,), dtype="u1")
        self_environ[:] = h5py.VirtualSource(".", "/environ", shape=(ENVIRON_BYTES,))
        f.create_virtual_dataset("vds_self_environ", self_environ, fillvalue=0)
        self_link = h5py.VirtualLayout(shape=(n,), dtype="u1")
        self_link[:] = h5py.VirtualSource(".", "/elink", shape=(n,))
        f.create_virtual_dataset("vds_self_elink", self_link, fillvalue=0)
    return path


def _download_outputs(pipeline, bucket: str, into: Path) -> list[Path]:
    keys = []
    for page in pipeline.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys += [o["Key"] for o in page.get("Contents", [])]
    for key in keys:
        target = into / key
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pipeline.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return [into / k for k in keys]


def _decoded_icechunk_leaks(root: Path) -> list[str]:
    """Canaries in the arrays of an Icechunk repository copied to ``root`` (its native chunks decoded;
    virtual chunks point at the upload itself and are not fetched here)."""
    import icechunk
    import zarr

    session = icechunk.Repository.open(icechunk.local_filesystem_storage(str(root))).readonly_session("main")
    found = []

    def walk(group, prefix):
        for name, array in group.arrays():
            try:
                values = np.asarray(array[...])
            except Exception:  # a virtual chunk (in the upload, at an S3 location this copy cannot reach)
                continue
            data = values.astype(str).tobytes() if values.dtype.kind in "OUT" else values.tobytes()
            found.extend(f"{prefix}{name}: {hit}" for hit in leaks(data))
        for name, sub in group.groups():
            walk(sub, f"{prefix}{name}/")

    walk(zarr.open_group(session.store, mode="r"), "")
    return found


def _decoded_leaks(files: list[Path]) -> list[str]:
    """Canaries in the decoded values of every output: Zarr stores, Icechunk repositories, kerchunk's
    inline data, HDF5 files."""
    found = []
    names = {p.name for p in files}
    roots = {p.parent for p in files if p.name == "zarr.json" and not (p.parent.parent / "zarr.json").exists()}
    found += [hit for root in roots for hit in _decoded_zarr_leaks(root)]
    repos = {p.parent.parent for p in files if p.parent.name == "snapshots" or p.name == "repo"}
    found += [hit for repo in repos if (repo / "refs").exists() or (repo / "repo").exists()
              for hit in _decoded_icechunk_leaks(repo)]
    for path in files:
        if path.suffix == ".json" and path.name != "zarr.json":
            try:
                refs = json.loads(path.read_bytes()).get("refs", {})
            except (ValueError, AttributeError):
                refs = {}
            for key, value in refs.items():
                if isinstance(value, str) and value.startswith("base64:"):
                    found += [f"{path.name}:{key}: {hit}" for hit in leaks(base64.b64decode(value[7:]))]
        if path.suffix in (".h5", ".nc") or path.read_bytes()[:8] == b"\x89HDF\r\n\x1a\n":
            found += [f"{path}: {hit}" for hit in _decoded_hdf5_leaks(path)]
    assert names, "no output to scan"
    return found


def test_no_variant_in_the_outputs_bucket_holds_the_tasks_environment_or_a_local_file(local_cloud, tmp_path):
    from layoutlab.local import dispatch
    from layoutlab.local.pipeline import LocalPipeline

    secrets = plant_local_secrets(tmp_path / "secrets")
    grid = _hostile_grid(tmp_path / "hostile-grid.nc", secrets)
    pipeline = LocalPipeline(local_cloud)
    pipeline.setup()
    pipeline.put_plan("hostile", PLAN)
    try:
        outcomes = pipeline.deliver(pipeline.upload(grid, plan="hostile"))
        final = pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=900)
        dataset = outcomes[0]["dataset_id"]
        failures = [(f["stage"], f["reason"][:300]) for f in pipeline.store.items(dataset=dataset, kind="FAILURE")]
        assert list(final.values()) == ["SUCCEEDED"], failures
        outputs = tmp_path / "outputs"
        files = _download_outputs(pipeline, dispatch.OUTPUTS_BUCKET, outputs)
        assert leaks_under(outputs) == {}
        assert _decoded_leaks(files) == []
        # the ordinary variables were converted: every variant of the plan is READY, and each
        # virtual variant names the datasets it did not reference, with the reason
        variants = {v["variant"]: v for v in pipeline.store.items(dataset=dataset, kind="VARIANT")}
        assert {"original", "paged-64KiB", "zarr-2x5x6", "icechunk-2x5x6", "kerchunk-original",
                "icechunk-virtual"} <= set(variants), variants
        # repack copies a file whole or refuses it: it refuses this one, naming the upload and the reason
        paged = variants.pop("paged-64KiB")
        assert paged["status"] == "FAILURE", paged
        assert paged["reason"].startswith(f"s3://{dispatch.INGEST_BUCKET}/incoming/hostile-grid.nc: "), paged["reason"]
        assert "outside the file" in paged["reason"] and "layoutlab-convert" not in paged["reason"]
        assert all(v["status"] == "READY" for v in variants.values()), variants
        # the readers of values ran confined where the kernel has Landlock, and each record says so
        from layoutlab.sandbox import landlock_abi

        for name in ("zarr-2x5x6", "icechunk-2x5x6", "kerchunk-original", "icechunk-virtual"):
            isolation = variants[name]["isolation"]
            assert isolation["outside_file_check"] and isolation["landlock"] == bool(landlock_abi()), (name, isolation)
        for name in ("kerchunk-original", "icechunk-virtual"):
            skipped = {s["variable"]: s["reason"] for s in variants[name]["virtual"]["skipped"]}
            assert {"environ", "localfile", "vds", "vds_self_environ", "vds_self_elink"} <= set(skipped), skipped
        assert {s["variable"] for s in variants["zarr-2x5x6"]["rechunk"]["skipped"]} >= {
            "environ", "localfile", "vds", "vds_self_environ", "vds_self_elink"}
    finally:
        local_cloud.reset()
