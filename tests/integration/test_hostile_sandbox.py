"""Hostile inputs, second round (issue 36, rows 1 and 5; items 1-2): isolation by construction.

A virtual dataset whose source is the file itself (``"."``) over a dataset with external raw storage
or behind an external link made rechunk and native Icechunk copy ``/proc/<pid>/environ`` and local
files into their outputs: the pre-pass skipped ``"."`` sources, and HDF5 resolves a virtual dataset's
sources with its own link access. Two walls now stand, each tested on its own:

- the pre-pass (``hdf5_input.data_outside_file``) follows ``"."`` sources transitively;
- the worker that reads values is confined by Landlock (layoutlab/sandbox.py) to its input, its
  scratch folder and the runtime: with the pre-pass switched off, nothing outside reaches an output.

And no process that holds credentials can be read from a worker: the local cloud is non-dumpable and
a worker holds no capability, so ``/proc/<pid>/environ`` of every other process is closed to it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hostile_files import (ENV_CANARY, ENV_CANARY_NAME, FILE_CANARY, every_hostile_file, leaks, leaks_under,
                           plant_local_secrets)
from repack_helpers import run_layoutlab

pytestmark = pytest.mark.slow

VDS_ATTACKS = ["virtual-self-external-environ", "virtual-self-external-file", "virtual-self-external-link",
               "virtual-self-nested"]
landlock = pytest.mark.skipif(not __import__("layoutlab.sandbox").sandbox.landlock_abi(),
                              reason="this kernel offers no Landlock")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    work = tmp_path_factory.mktemp("hostile-vds")
    secrets = plant_local_secrets(work / "secrets")
    return every_hostile_file(work / "files", secrets)


def _zarr_values_leak(root: Path) -> list[str]:
    import zarr

    found = []
    group = zarr.open_group(zarr.storage.LocalStore(root, read_only=True), mode="r")
    for name, array in group.arrays():
        found += [f"{name}: {hit}" for hit in leaks(np.asarray(array[...]).tobytes())]
    for name, _ in group.groups():
        found += [f"{name}/{hit}" for hit in _zarr_values_leak(root / name)]
    return found


@pytest.mark.parametrize("attack", VDS_ATTACKS)
def test_the_attack_reads_outside_when_nothing_stops_it(hostile, attack, tmp_path):
    """The scan can fail: h5py alone, in a process with the canary in its initial environment, copies it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, h5py; "
                           "sys.stdout.buffer.write(h5py.File(sys.argv[1], 'r')['notes'][()].tobytes())",
                           str(hostile[attack])], capture_output=True, env={**os.environ, ENV_CANARY_NAME: ENV_CANARY})
    assert done.returncode == 0, done.stderr
    assert leaks(done.stdout)


@pytest.mark.parametrize("attack", VDS_ATTACKS)
def test_rechunk_skips_a_virtual_dataset_over_its_own_file_that_reads_outside(hostile, attack, tmp_path):
    out = tmp_path / "out.zarr"
    code, stdout, stderr, _ = run_layoutlab("rechunk", hostile[attack], out, "--no-progress",
                                            env={ENV_CANARY_NAME: ENV_CANARY})
    assert code == 0, stderr
    assert leaks_under(out) == {} and _zarr_values_leak(out) == []
    assert not leaks(stdout.encode() + stderr.encode())
    skipped = {s["variable"].lstrip("/"): s["reason"] for s in json.loads(stdout)["skipped"]}
    assert "notes" in skipped and "of its own file" in skipped["notes"] and "not read" in skipped["notes"], skipped
    assert "\n" not in skipped["notes"]


def _rechunk_local(src: str, out: str) -> dict:
    from layoutlab.convert.rechunk_zarr import rechunk

    return rechunk(src, out, progress=False)


def _icechunk_local(src: str, out: str) -> dict:
    import icechunk
    import zarr

    from layoutlab.hdf5_input import open_input

    # what write_icechunk_native does per variable, to a local repository: h5py values into Icechunk
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(out))
    session = repo.writable_session("main")
    root = zarr.open_group(session.store, mode="w", zarr_format=3)
    with open_input(src) as f:
        for name in ("notes", "temperature"):
            try:
                values = f[name][()]
            except OSError as error:  # the kernel refused the open HDF5 tried: nothing read
                root.attrs[name] = f"refused: {str(error).splitlines()[0][:80]}"
                continue
            root.create_array(name, data=values)
    session.commit("hostile")
    return {}


def _run_confined(fn, src: Path, out: Path, monkeypatch, *, sandbox_on: bool):
    """``fn(src, out)`` in a guarded worker confined to ``src`` and ``out``'s folder, the pre-pass off; the
    canary in the environment the worker inherits (its own /proc/self/environ would show it)."""
    from layoutlab.guard import start_guarded

    monkeypatch.setenv("LAYOUTLAB_OUTSIDE_FILE_CHECK", "0")
    monkeypatch.setenv("LAYOUTLAB_SANDBOX", "1" if sandbox_on else "0")
    monkeypatch.setenv(ENV_CANARY_NAME, ENV_CANARY)
    out.parent.mkdir(parents=True, exist_ok=True)
    call = start_guarded(fn, str(src), str(out), path=str(src), confine=([str(src)], [str(out.parent)]))
    try:
        call.result()
    except Exception as error:  # what the confined libraries made of a refused open: never a leak
        assert not leaks(str(error).encode())
        print(f"the worker failed: {str(error)[:2000]}")
    return call.isolation


def _icechunk_values_leak(root: Path) -> list[str]:
    """Canaries in the decoded arrays of the Icechunk repository at ``root``, read in a new interpreter: Icechunk's
    runtime threads started in this process would make every later forked worker that uses Icechunk hang."""
    import subprocess
    import sys

    script = ("import sys, icechunk, zarr, numpy as np\n"
              "s = icechunk.Repository.open(icechunk.local_filesystem_storage(sys.argv[1])).readonly_session('main')\n"
              "g = zarr.open_group(s.store, mode='r')\n"
              "sys.stdout.buffer.write(b''.join(np.asarray(a[...]).tobytes() for _, a in g.arrays()))")
    done = subprocess.run([sys.executable, "-c", script, str(root)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return leaks(done.stdout)


def _file_and_environ_leaks(fn, hostile, attack, tmp_path, monkeypatch, sandbox_on):
    if attack == "virtual-self-external-environ":
        # /proc/self/environ shows the initial environment of the process: a worker forked from here shows
        # this test process's, which has no canary. Aim at a process that has one: a child started with it.
        import subprocess
        import sys

        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                  env={**os.environ, ENV_CANARY_NAME: ENV_CANARY})
        try:
            from hostile_files import virtual_self_over_external

            src = virtual_self_over_external(tmp_path / "vds-pid-environ.h5", f"/proc/{holder.pid}/environ", 4096)
            out = tmp_path / "work" / "out"
            isolation = _run_confined(fn, src, out, monkeypatch, sandbox_on=sandbox_on)
        finally:
            holder.kill()
            holder.wait()
    else:
        out = tmp_path / "work" / "out"
        isolation = _run_confined(fn, hostile[attack], out, monkeypatch, sandbox_on=sandbox_on)
    found = leaks_under(out.parent)
    if (out / "zarr.json").exists():
        found = {**found, **{hit: [] for hit in _zarr_values_leak(out)}}
    if (out / "repo").exists() or (out / "refs").exists():
        found = {**found, **{hit: [] for hit in _icechunk_values_leak(out)}}
    return found, isolation


@landlock
@pytest.mark.parametrize("convert", [_rechunk_local, _icechunk_local], ids=["rechunk", "icechunk"])
@pytest.mark.parametrize("attack", VDS_ATTACKS)
def test_with_landlock_nothing_outside_reaches_an_output_even_without_the_pre_pass(hostile, attack, convert,
                                                                                    tmp_path, monkeypatch):
    found, isolation = _file_and_environ_leaks(convert, hostile, attack, tmp_path, monkeypatch, sandbox_on=True)
    assert isolation is not None and isolation.landlock, isolation
    assert not isolation.outside_file_check and isolation.capabilities_dropped
    assert found == {}


@landlock
@pytest.mark.parametrize("attack", ["virtual-self-external-file", "virtual-self-external-link"])
def test_without_landlock_and_without_the_pre_pass_the_same_worker_leaks(hostile, attack, tmp_path, monkeypatch):
    """The test above can fail: the same worker, both walls off, copies the canary. (Not the environment of
    another process: a worker without capabilities cannot read that of a process that has some, even as
    root — the capability drop, which holds whether Landlock is in force or not.)"""
    found, isolation = _file_and_environ_leaks(_rechunk_local, hostile, attack, tmp_path, monkeypatch,
                                               sandbox_on=False)
    assert isolation is not None and not isolation.landlock
    assert found, "expected the canary in the output with both walls off"


# -- no secret readable from a worker ------------------------------------------------------------------------
CLOUD_CANARY = "CLOUD-ENVIRON-CANARY-93be11d0"


def _read_every_environ(pids: list[int]) -> dict:
    """From inside a worker: the canary in any ``/proc/<pid>/environ`` of ``pids`` (every process, listed by
    the parent: a confined worker cannot even list /proc)."""
    found, refused, read = [], 0, 0
    for entry in pids:
        if entry == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                data = fh.read()
        except OSError:
            refused += 1
            continue
        read += 1
        if CLOUD_CANARY.encode() in data:
            found.append(int(entry))
    return {"found": found, "refused": refused, "read": read}


@pytest.fixture
def cloud_with_canary(tmp_path):
    """A local cloud whose environment (as `layoutlab local up`'s would) holds a secret."""
    from layoutlab.local.cloud import start_local_cloud

    os.environ["LAYOUTLAB_TEST_CLOUD_SECRET"] = CLOUD_CANARY  # (only while the cloud starts: it inherits it)
    try:
        cloud = start_local_cloud(tmp_path / "cloud.json", latency_ms=0, bandwidth_mbps=0,
                                  log_path=tmp_path / "cloud.log")
    finally:
        os.environ.pop("LAYOUTLAB_TEST_CLOUD_SECRET")
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.mark.parametrize("sandbox_on", [False, True], ids=["non-dumpable-alone", "with-landlock"])
def test_a_worker_reads_no_secret_from_any_process_environment(cloud_with_canary, tmp_path, monkeypatch, sandbox_on):
    from layoutlab.guard import start_guarded

    assert cloud_with_canary.pid and os.path.exists(f"/proc/{cloud_with_canary.pid}")
    monkeypatch.setenv("LAYOUTLAB_SANDBOX", "1" if sandbox_on else "0")
    pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    assert cloud_with_canary.pid in pids
    call = start_guarded(_read_every_environ, pids, path="worker", confine=([], [str(tmp_path)]))
    seen = call.result()
    assert seen["found"] == [], f"the canary was read from /proc/<pid>/environ of {seen['found']}"
    assert seen["refused"] >= 1  # (the local cloud's at least)
    assert call.isolation.capabilities_dropped


# -- through the local pipeline, the pre-pass off: Landlock alone -------------------------------------------
PIPELINE_PLAN = {
    "name": "hostile-landlock",
    "variants": [
        {"kind": "original"},
        {"kind": "rechunk-zarr", "chunks": {"time": 2, "lat": 5, "lon": 6}, "applies_to": "grid"},
        {"kind": "icechunk", "chunks": {"time": 2, "lat": 5, "lon": 6}, "applies_to": "grid"},
        {"kind": "virtual-kerchunk"},
    ],
    "patterns": {"grid": ["timeseries-point"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": ["zarr-obstore"], "kerchunk": ["kerchunk-fsspec"],
                "icechunk": ["icechunk"]},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 1,
}


@pytest.fixture
def cloud_without_pre_pass(tmp_path):
    """A local cloud whose tasks run with the pre-pass off (and whose own environment holds a secret)."""
    from layoutlab.local.cloud import start_local_cloud

    os.environ["LAYOUTLAB_TEST_CLOUD_SECRET"] = CLOUD_CANARY
    os.environ["LAYOUTLAB_OUTSIDE_FILE_CHECK"] = "0"
    try:
        cloud = start_local_cloud(tmp_path / "cloud.json", latency_ms=0, bandwidth_mbps=0,
                                  log_path=tmp_path / "cloud.log")
    finally:
        os.environ.pop("LAYOUTLAB_TEST_CLOUD_SECRET")
        os.environ.pop("LAYOUTLAB_OUTSIDE_FILE_CHECK")
    try:
        yield cloud
    finally:
        cloud.stop()


def _pipeline_helpers():
    """The outputs scan of test_hostile_outside_file.py (one scan for both suites)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hostile_outside_file", Path(__file__).with_name(
        "test_hostile_outside_file.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._decoded_leaks, module._download_outputs


@landlock
def test_pipeline_with_landlock_publishes_nothing_outside_even_without_the_pre_pass(cloud_without_pre_pass, tmp_path):
    """Issue 36's attack as it was run: a virtual dataset over "." whose source is stored in
    ``/proc/<pid>/environ`` of the local cloud's process, plus one over a local file and one over an external
    link; the pre-pass is off in every task, so only the workers' confinement stands between them and the
    outputs."""
    import h5py

    from hostile_files import ENVIRON_BYTES
    from layoutlab.local import dispatch
    from layoutlab.local.pipeline import LocalPipeline
    from layoutlab.samples import geos
    _decoded_leaks, _download_outputs = _pipeline_helpers()

    secrets = plant_local_secrets(tmp_path / "secrets")
    grid = tmp_path / "hostile-vds-grid.nc"
    geos.write_geos(grid, shape=(4, 10, 12))
    n = len(FILE_CANARY) * 4
    with h5py.File(grid, "a") as f:
        for name, target, size in (("cloud_environ", f"/proc/{cloud_without_pre_pass.pid}/environ", ENVIRON_BYTES),
                                   ("local_file", os.fspath(secrets["text"]), n)):
            f.create_dataset(f"hidden/{name}", shape=(size,), dtype="u1", external=[(target, 0, size)])
            layout = h5py.VirtualLayout(shape=(size,), dtype="u1")
            layout[:] = h5py.VirtualSource(".", f"/hidden/{name}", shape=(size,))
            f.create_virtual_dataset(f"vds_{name}", layout, fillvalue=0)
        f["hidden/elink"] = h5py.ExternalLink(os.fspath(secrets["hdf5"]), "/secret")
        layout = h5py.VirtualLayout(shape=(n,), dtype="u1")
        layout[:] = h5py.VirtualSource(".", "/hidden/elink", shape=(n,))
        f.create_virtual_dataset("vds_elink", layout, fillvalue=0)
    pipeline = LocalPipeline(cloud_without_pre_pass)
    pipeline.setup()
    pipeline.put_plan("hostile-landlock", PIPELINE_PLAN)
    outcomes = pipeline.deliver(pipeline.upload(grid, plan="hostile-landlock"))
    pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=900)
    dataset = outcomes[0]["dataset_id"]
    outputs = tmp_path / "outputs"
    files = _download_outputs(pipeline, dispatch.OUTPUTS_BUCKET, outputs)
    found = {path: hits for path, hits in leaks_under(outputs).items()}
    found.update({hit: [] for hit in _decoded_leaks(files)})
    cloud_canary = [str(p) for p in outputs.rglob("*") if p.is_file() and CLOUD_CANARY.encode() in p.read_bytes()]
    assert found == {} and cloud_canary == []
    variants = {v["variant"]: v for v in pipeline.store.items(dataset=dataset, kind="VARIANT")}
    failures = [f["reason"] for f in pipeline.store.items(dataset=dataset, kind="FAILURE")]
    assert not any(leaks(reason.encode()) or CLOUD_CANARY in reason for reason in failures)
    # each variant is READY (what was readable inside the file) or a FAILURE naming the upload and the reason
    for name in ("zarr-2x5x6", "icechunk-2x5x6", "kerchunk-original"):
        assert name in variants, (sorted(variants), failures)
        if variants[name]["status"] == "READY":
            isolation = variants[name]["isolation"]
            assert isolation["landlock"] and not isolation["outside_file_check"], (name, isolation)
        else:
            assert "outside the upload" in variants[name]["reason"], variants[name]["reason"]


@pytest.mark.parametrize("non_dumpable", [True, False], ids=["non-dumpable", "dumpable"])
def test_non_dumpable_closes_a_credential_holders_environment_to_a_worker(non_dumpable, tmp_path, monkeypatch):
    """The mechanism alone, as on Lambda (a user without capabilities): a holder of the canary that drops its
    capabilities, non-dumpable or not, and a worker (Landlock off) reading its /proc/<pid>/environ. The
    dumpable case shows the read works when nothing closes it."""
    import subprocess
    import sys

    from layoutlab.guard import start_guarded

    script = ("import sys, time\n"
              "from layoutlab import sandbox\n"
              "assert sandbox._drop_privileges(sandbox._libc())\n"
              "if sys.argv[1] == '1': assert sandbox.make_non_dumpable()\n"
              "print('ready', flush=True); time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", script, "1" if non_dumpable else "0"], stdout=subprocess.PIPE,
                              env={**os.environ, "LAYOUTLAB_TEST_CLOUD_SECRET": CLOUD_CANARY})
    try:
        assert holder.stdout.readline().strip() == b"ready"
        monkeypatch.setenv("LAYOUTLAB_SANDBOX", "0")
        seen = start_guarded(_read_every_environ, [holder.pid], path="worker", confine=([], [str(tmp_path)])).result()
    finally:
        holder.kill()
        holder.wait()
    assert seen["found"] == ([] if non_dumpable else [holder.pid]), seen


# -- a plan's pattern_params.variable naming a dataset stored outside the file --------------------------------
@pytest.mark.parametrize("attack", ["external-local-file", "virtual-self-external-file"])
@pytest.mark.parametrize("pre_pass", ["1", "0"], ids=["pre-pass", "landlock-alone"])
def test_a_benchmark_case_never_reads_a_plans_variable_stored_outside_the_file(cloud, hostile, attack, pre_pass,
                                                                              monkeypatch):
    """Issue 36 row 5: ``pattern_params.variable`` named a dataset with external storage and the case read
    the local file, status ok. Now the case is an error naming the variable and the reason (pre-pass), or,
    with the pre-pass off, the confined case process cannot open the file (Landlock)."""
    from layoutlab.bench.runner import run_case_isolated, upload_target
    from layoutlab.sandbox import landlock_abi

    if pre_pass == "0" and not landlock_abi():
        pytest.skip("this kernel offers no Landlock")
    monkeypatch.setenv("LAYOUTLAB_OUTSIDE_FILE_CHECK", pre_pass)
    target = upload_target(hostile[attack], cloud)
    record = run_case_isolated({"target": target, "pattern": "full-read-throughput", "reader": "h5py-s3fs-default",
                                "params": {"variable": "notes"}, "latency_ms": 0, "bandwidth_mbps": 0}, cloud)
    assert record["status"] == "error", record
    assert not leaks(json.dumps(record, default=str).encode())
    sandbox = record["isolation"]["sandbox"]
    assert sandbox["landlock"] == bool(landlock_abi()) and sandbox["outside_file_check"] == (pre_pass == "1")
    if pre_pass == "1":
        assert "notes" in record["error"] and "not read" in record["error"] and "\n" not in record["error"], record
