"""``layoutlab inspect --check FILE...``: the cloud-readiness check, run as a user runs it.

Small files made with h5py / netCDF4 break one rule each; the CLI runs in a subprocess
(``python -m layoutlab.cli inspect --check ...``) and its lines, JSON and exit status are
what is asserted. Where a problem comes with a ``layoutlab repack`` fix, the fix is run as
printed and the repacked file must then pass: the advice is checked, not just its wording.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import h5py
import netCDF4
import numpy as np
import pytest

from layoutlab.formats.readiness import RULE_NAMES, Thresholds, check_report

MiB = 1 << 20
RNG = np.random.default_rng(17)


def layoutlab(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "layoutlab.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def check(*args) -> subprocess.CompletedProcess:
    return layoutlab("inspect", "--check", *args)


def check_json(*args) -> tuple[int, list[dict]]:
    done = check("--json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def paged(path, page=1 * MiB):
    return h5py.File(path, "w", fs_strategy="page", fs_persist=True, fs_page_size=page)


def write_good(path):
    """Paged (1 MiB pages), one dataset in 400 kB chunks: passes every rule."""
    with paged(path) as f:
        f.create_dataset("x", data=RNG.random(400_000), chunks=(50_000,))
        f["x"].attrs["units"] = "m"
    return path


def write_unpaged(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=RNG.random(400_000), chunks=(50_000,))
    return path


def write_tiny_chunks(path):
    with paged(path) as f:
        f.create_dataset("gt1l/h_ph", data=RNG.random(100_000).astype("f4"), chunks=(1_000,))  # 4 kB chunks
        f.create_dataset("single", data=RNG.random(100).astype("f4"), chunks=(100,))  # one chunk: exempt
    return path


def write_huge_chunks(path):
    with paged(path, 8 * MiB) as f:
        f.create_dataset("grid", data=RNG.random((2, 1_100_000)), chunks=(2, 1_100_000))  # one 17.6 MB chunk
        f.create_dataset("fine", data=RNG.random(500_000), chunks=(250_000,))
    return path


def write_unlimited(path):
    with paged(path) as f:
        f.create_dataset("time", data=RNG.random(200_000), maxshape=(None,), chunks=(50_000,))
        f.create_dataset("empty", shape=(0,), maxshape=(None,), chunks=(1_000,), dtype="f8")  # nothing to read
    return path


def write_compact(path):
    with paged(path) as f:
        f.create_dataset("x", data=RNG.random(400_000), chunks=(50_000,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        h5py.h5d.create(f.id, b"flags", h5py.h5t.NATIVE_INT32, h5py.h5s.create_simple((16,)), dcpl)
        f["flags"][...] = np.arange(16, dtype="i4")
    return path


def write_chunk_over_page(path):
    with paged(path, 1 * MiB) as f:
        f.create_dataset("x", data=RNG.random(1_000_000), chunks=(250_000,))  # 2 MB chunks, 1 MiB pages
    return path


def write_netcdf3(path):
    with netCDF4.Dataset(path, "w", format="NETCDF3_CLASSIC") as nc:
        nc.createDimension("t", 10)
        nc.createVariable("v", "f4", ("t",))[:] = np.arange(10)
    return path


def write_scattered(path):
    """Unpaged, metadata written between datasets all through the file (as a writer that adds
    variables group by group leaves it)."""
    with h5py.File(path, "w") as f:
        for i in range(40):
            group = f.create_group(f"g{i:02d}")
            group.attrs["title"] = f"group {i}"
            group.create_dataset("v", data=RNG.random(25_000), chunks=(25_000,))  # 200 kB, one chunk
    return path


WRITERS = {"good": write_good, "unpaged": write_unpaged, "tiny": write_tiny_chunks, "huge": write_huge_chunks,
           "unlimited": write_unlimited, "compact": write_compact, "over_page": write_chunk_over_page,
           "netcdf3": write_netcdf3, "scattered": write_scattered}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("check")
    return {name: write(folder / f"{name}{'.nc' if name == 'netcdf3' else '.h5'}") for name, write in WRITERS.items()}


@pytest.fixture(scope="module")
def all_checked(files):
    """One --check over every file (text), and one with --json."""
    paths = list(files.values())
    text = check(*paths)
    code, results = check_json(*paths)
    return text, code, {r["file"]: r for r in results}


def problems(all_checked, path) -> dict[str, dict]:
    return {p["rule"]: p for p in all_checked[2][str(path)]["problems"]}


def lines_for(all_checked, path) -> list[str]:
    return [line for line in all_checked[0].stdout.splitlines() if line.startswith(f"{path}: ")]


def run_fix(problem: dict, tmp_path) -> str:
    """Run the ``layoutlab repack IN OUT ...`` a fix names (output moved into tmp_path); the output path."""
    command = problem["fix"].split(" (")[0]
    words = shlex.split(command)
    assert words[:2] == ["layoutlab", "repack"], problem["fix"]
    out = tmp_path / words[3].rsplit("/", 1)[-1]
    words[3] = str(out)
    done = layoutlab(*words[1:])
    assert done.returncode == 0, done.stderr
    return out


def test_a_paged_file_with_good_chunks_is_cloud_ready(files):
    done = check(files["good"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().startswith(f"{files['good']}: cloud-ready (paged, 1 MiB pages")
    assert done.stderr == ""


def test_every_file_gets_a_verdict_and_a_failing_file_fails_the_run(all_checked, files):
    text, code, results = all_checked
    assert text.returncode == 1 and code == 1
    assert set(results) == {str(p) for p in files.values()}
    for name, path in files.items():
        lines = lines_for(all_checked, path)
        assert lines, f"no line for {path}"
        if name == "good":
            assert results[str(path)]["ok"] and len(lines) == 1 and "cloud-ready" in lines[0]
        else:
            assert not results[str(path)]["ok"]
            assert len(lines) == len(results[str(path)]["problems"])  # one line per problem
            assert all(re.search(r" \(.+ vs .+\) — fix: \S", line) for line in lines), lines


def test_an_unpaged_file_fails_and_its_fix_makes_it_pass(all_checked, files, tmp_path):
    found = problems(all_checked, files["unpaged"])
    assert set(found) == {"not-paged"}
    problem = found["not-paged"]
    assert (problem["value"], problem["threshold"]) == ("FSM_AGGR", "PAGE")
    line, = lines_for(all_checked, files["unpaged"])
    assert "not paged (file-space strategy FSM_AGGR vs PAGE required) — fix: layoutlab repack " in line
    page = re.search(r"--page-size (\S+)", problem["fix"]).group(1)
    assert re.search(r"h5repack -S PAGE -P 1 -G \d+ ", problem["fix"])
    assert page == "512KiB"  # the smallest page holding its 400 kB chunks (and its few kB of metadata)
    fixed = run_fix(problem, tmp_path)
    done = check(fixed)
    assert done.returncode == 0 and f"{fixed}: cloud-ready (paged, 512 KiB pages" in done.stdout


def test_tiny_chunks_name_the_dataset_and_the_fix_grows_them(all_checked, files, tmp_path):
    found = problems(all_checked, files["tiny"])
    assert set(found) == {"small-chunks"}
    problem = found["small-chunks"]
    assert problem["datasets"] == ["/gt1l/h_ph"]  # the one-chunk dataset is not blamed
    assert (problem["value"], problem["threshold"]) == (4_000, 100_000)
    assert "(median stored chunk 4 kB vs at least 100 kB)" in lines_for(all_checked, files["tiny"])[0]
    assert "--target-chunk-bytes" in problem["fix"] and "h5repack -l /gt1l/h_ph:CHUNK=" in problem["fix"]
    fixed = run_fix(problem, tmp_path)
    assert check(fixed).returncode == 0


def test_huge_chunks_fail_with_a_smaller_chunk_shape_that_passes(all_checked, files, tmp_path):
    found = problems(all_checked, files["huge"])
    assert set(found) == {"large-chunks", "chunks-over-page"}
    problem = found["large-chunks"]
    assert problem["datasets"] == ["/grid"] and problem["threshold"] == 16 * MiB
    assert problem["value"] == 2 * 1_100_000 * 8
    assert "--chunks grid=" in problem["fix"]
    fixed = run_fix(problem, tmp_path)
    assert check(fixed).returncode == 0


def test_a_chunk_larger_than_the_page_asks_for_larger_pages(all_checked, files, tmp_path):
    found = problems(all_checked, files["over_page"])
    assert set(found) == {"chunks-over-page"}
    problem = found["chunks-over-page"]
    assert (problem["value"], problem["threshold"]) == (2_000_000, 1 * MiB)
    assert "--page-size 2MiB" in problem["fix"] and "-G 2097152" in problem["fix"]
    fixed = run_fix(problem, tmp_path)
    assert check(fixed).returncode == 0


def test_unlimited_dimensions_holding_data_fail_and_repack_fixes_them(all_checked, files, tmp_path):
    found = problems(all_checked, files["unlimited"])
    assert set(found) == {"unlimited"}
    assert found["unlimited"]["datasets"] == ["/time"]  # the zero-length one has nothing to read or fix
    fixed = run_fix(found["unlimited"], tmp_path)
    assert check(fixed).returncode == 0


def test_compact_datasets_fail_and_repack_makes_them_contiguous(all_checked, files, tmp_path):
    found = problems(all_checked, files["compact"])
    assert set(found) == {"compact"}
    assert found["compact"]["datasets"] == ["/flags"] and "h5repack -l /flags:CONTI" in found["compact"]["fix"]
    fixed = run_fix(found["compact"], tmp_path)
    assert check(fixed).returncode == 0


def test_a_netcdf3_file_cannot_be_checked_and_fails_with_its_reason(all_checked, files):
    found = problems(all_checked, files["netcdf3"])
    assert set(found) == {"not-hdf5"}
    line, = lines_for(all_checked, files["netcdf3"])
    assert "not checkable: NetCDF-3 classic file" in line
    assert f"fix: nccopy -k nc4 {files['netcdf3']} " in line


def test_scattered_metadata_counts_block_reads_and_the_threshold_moves_the_verdict(files):
    path = files["scattered"]
    code, (result,) = check_json("--page-size", "64KiB", path)
    found = {p["rule"]: p for p in result["problems"]}
    assert code == 1 and set(found) == {"not-paged", "scattered-metadata"}
    blocks = found["scattered-metadata"]["value"]
    assert blocks > 4 and found["scattered-metadata"]["threshold"] == 4
    code, (result,) = check_json("--page-size", "64KiB", "--max-metadata-requests", blocks, path)
    assert {p["rule"] for p in result["problems"]} == {"not-paged"}
    # Read in 8 MiB blocks (the default), the whole 8 MB file is one block: not scattered.
    code, (result,) = check_json(path)
    assert {p["rule"] for p in result["problems"]} == {"not-paged"}


def test_the_repacked_scattered_file_reads_its_metadata_in_few_pages(files, tmp_path):
    """The page count a paged file reports is what HDF5's page buffer reads, not the gaps between
    raw data (each 200 kB chunk leaves a part-filled page behind it)."""
    code, (result,) = check_json(files["scattered"])
    fixed = run_fix({p["rule"]: p for p in result["problems"]}["not-paged"], tmp_path)
    done = check(fixed)
    assert done.returncode == 0, done.stdout
    pages = int(re.search(r"metadata in (\d+) page", done.stdout).group(1))
    assert 1 <= pages <= 2
    report = json.loads(layoutlab("inspect", "--json", fixed).stdout)
    assert report["hdf5"]["metadata_scatter"]["pages"] > 4 * pages  # what the gaps alone would have said


def test_thresholds_change_the_verdict(files):
    assert check(files["tiny"], "--min-chunk", "4KB").returncode == 0
    assert check(files["tiny"], "--allow", "small-chunks").returncode == 0
    strict = check(files["good"], "--min-chunk", "1MB")
    assert strict.returncode == 1 and "small chunks in 1 dataset (/x) (median stored chunk 400 kB vs at least 1 MB)" \
        in strict.stdout
    assert check(files["huge"], "--max-chunk", "32MiB", "--allow", "chunks-over-page").returncode == 0
    assert check(files["unlimited"], "--allow", "unlimited").returncode == 0
    assert check(files["compact"], "--allow", "unlimited,compact").returncode == 0
    allowed = check(files["compact"], "--allow", "unlimited", "--allow", "compact")
    assert "cloud-ready" in allowed.stdout and "allowed: compact,unlimited" in allowed.stdout


def test_a_missing_and_a_damaged_file_exit_2_with_their_reasons_and_the_others_are_still_checked(files, tmp_path):
    missing = tmp_path / "missing.h5"
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(files["good"].read_bytes()[:3000])  # the superblock survives, the rest is cut
    done = check(files["good"], missing, damaged, files["tiny"])
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = done.stderr.strip().splitlines()
    assert errors[0] == f"layoutlab inspect: error: {missing}: no such file"
    assert errors[1].startswith(f"layoutlab inspect: error: {damaged}: ") and "damaged" in errors[1]
    assert len(errors) == 2
    assert f"{files['good']}: cloud-ready" in done.stdout and f"{files['tiny']}: small chunks" in done.stdout
    code, results = check_json(files["good"], missing)
    assert code == 2
    assert results[1] == {"file": str(missing), "ok": False, "format": None, "problems": [],
                          "error": f"{missing}: no such file"}


def test_json_lists_each_file_with_its_problems(all_checked):
    _, _, results = all_checked
    for result in results.values():
        assert {"file", "ok", "problems"} <= set(result)
        assert result["ok"] == (not result["problems"])
        for problem in result["problems"]:
            assert {"rule", "message", "value", "threshold", "fix"} <= set(problem)
            assert problem["rule"] in RULE_NAMES and problem["fix"]
    json.dumps(list(results.values()))


@pytest.mark.parametrize("args, message", [
    (["--min-chunk", "12XB"], "--min-chunk: not a size: '12XB'"),
    (["--min-chunk", "32MiB"], "is not below --max-chunk"),
    (["--max-metadata-requests", "0"], "--max-metadata-requests '0': expected a whole number >= 1"),
    (["--allow", "paging"], "--allow paging: not a rule that can be allowed"),
    (["--allow", "not-hdf5"], "a file that is not HDF5 cannot be checked"),
])
def test_bad_options_are_one_line_usage_errors(files, args, message):
    done = check(*args, files["good"])
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr


def test_without_check_inspect_reports_one_file_and_asks_for_check_for_several(files):
    single = layoutlab("inspect", files["good"])
    assert single.returncode == 0 and "file space      PAGE, 1.0 MiB pages" in single.stdout
    several = layoutlab("inspect", files["good"], files["tiny"])
    assert several.returncode == 2
    assert "2 files given: the full report is for one FILE; use --check to check several" in several.stderr
    stray = layoutlab("inspect", "--min-chunk", "1MB", files["good"])
    assert stray.returncode == 2 and "--min-chunk: only with --check" in stray.stderr


def test_help_documents_every_rule_with_its_default():
    text = layoutlab("inspect", "--help").stdout
    for name in RULE_NAMES:
        assert f"  {name} [" in text
    for default in ("--min-chunk 100KB", "--max-chunk 16MiB", "--max-metadata-requests 4"):
        assert default in text


def test_check_report_fix_pages_hold_the_metadata_in_half_the_allowed_requests():
    """An unpaged file with 10 MB of metadata: 4 GETs allowed -> pages of at least 5 MB (8 MiB)."""
    report = {"location": "granule.h5", "format": "hdf5", "size_bytes": 100_000_000, "hdf5": {
        "file_space": {"strategy": "FSM_AGGR", "paged": False, "page_size": None},
        "metadata_scatter": {"metadata_pages": 3, "assumed_page_size": 8 * MiB},
        "metadata_bytes_estimate": 10_000_000, "raw_data_bytes": 90_000_000, "chunked_datasets": [],
        "unlimited_datasets": {"with_data": 0, "with_data_names": []},
        "compact_datasets": {"count": 0, "names": []}}}
    (problem,) = check_report(report, Thresholds())
    assert problem["rule"] == "not-paged" and "--page-size 8MiB" in problem["fix"]
    (problem,) = check_report(report, Thresholds(max_metadata_requests=40))
    assert "--page-size 512KiB" in problem["fix"]


def test_a_paged_file_whose_metadata_spans_many_pages_gets_larger_pages(tmp_path):
    path = tmp_path / "small-pages.h5"
    with paged(path, 4096) as f:  # HDF5's default page: far too small for ~100 kB of metadata
        for i in range(150):
            group = f.create_group(f"beam{i:03d}")
            group.attrs["description"] = "x" * 200
            group.create_dataset("v", data=RNG.random(2_000))
    code, (result,) = check_json(path)
    found = {p["rule"]: p for p in result["problems"]}
    assert code == 1 and set(found) == {"scattered-metadata"}
    problem = found["scattered-metadata"]
    assert problem["value"] > 4 and "ranged GETs of 4 KiB to read it vs at most 4" in problem["measured"]
    fixed = run_fix(problem, tmp_path)
    done = check(fixed)
    assert done.returncode == 0, done.stdout


def test_the_proposed_page_pads_the_file_less_than_the_obvious_choices(tmp_path):
    """Chunks of 150,000 bytes: a 256 KiB page holds one (41 % of it empty), an 8 MiB page on a 15 MB
    file leaves most of its metadata page and last raw page empty. The check's page must pad less
    than both, and its estimate must be the size repack then writes, within 2 points."""
    path = tmp_path / "grid.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("v", data=RNG.random((100, 37_500)).astype("f4"), chunks=(1, 37_500))
    code, (result,) = check_json(path)
    fix = {p["rule"]: p for p in result["problems"]}["not-paged"]["fix"]
    proposed = re.search(r"--page-size (\S+)", fix).group(1)
    estimate = float(re.search(r"estimated size ([+-]\d+)%", fix).group(1)) / 100
    size = path.stat().st_size

    def overhead(page):
        out = tmp_path / f"grid-{page}.h5"
        done = layoutlab("repack", path, out, "--page-size", page, "--no-verify")
        assert done.returncode == 0, done.stderr
        return out.stat().st_size / size - 1

    chosen = overhead(proposed)
    assert proposed not in ("256KiB", "8MiB")
    assert chosen < overhead("256KiB") and chosen < overhead("8MiB")
    assert abs(chosen - estimate) <= 0.02, (proposed, chosen, estimate)
