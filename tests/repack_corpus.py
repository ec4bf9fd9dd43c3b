"""``layoutlab repack`` over the shared corpus of third-party files, judged from outside.

For each file: ``h5repack -S PAGE -G 4194304`` (the reference: could it be repacked?), then
``layoutlab repack`` as a user runs it (the CLI, verifying by default), then the output compared
with the input by the tools a reader uses: ``ncdump`` (header and data) when the netCDF library
reads the input, else ``h5dump`` (header and data, sorted by name). Only the changes repack
documents are normalised away: paging (not visible to either dump), COMPACT -> CONTIGUOUS (not
shown without ``-p``), unlimited -> fixed (``UNLIMITED ; // (N currently)`` vs ``N``, and
``H5S_UNLIMITED`` maximum dimensions), object addresses printed inside references, and what h5dump
prints for a reference whose target no link reaches (its kind is read from the bytes at an address).

Used by tests/integration/test_repack_corpus.py (the table test) and
benchmarks/corpus_repack.py (the outcome table in benchmarks/results/corpus_repack.json).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from shared_corpus import CORPUS  # (where the corpus is: one rule for every corpus test)

PAGE = 4194304
TOOLS = ("h5repack", "h5dump", "h5diff", "ncdump", "ncgen")
REPACK_TIMEOUT = 120


def corpus_files() -> list[str]:
    """Corpus-relative names of every input (``.cdl`` sources included: built by ``build_input``)."""
    names = []
    for path in sorted(CORPUS.rglob("*")):
        if path.is_file() and path.name != "README.md":
            names.append(str(path.relative_to(CORPUS)))
    return names


def build_input(name: str, workdir: Path) -> Path | str:
    """The file to repack: the corpus file itself, or a ``.cdl`` built with ncgen (its error text if it does not build)."""
    source = CORPUS / name
    if source.suffix != ".cdl":
        return source
    out = workdir / (source.stem + ".nc")
    done = subprocess.run(["ncgen", "-k", "nc4", "-o", str(out), str(source)], capture_output=True, text=True,
                          cwd=workdir)
    if done.returncode != 0 or not out.exists():
        return "ncgen: " + (done.stderr.strip().splitlines() or ["failed"])[-1]
    return out


def _run(command, timeout=REPACK_TIMEOUT, env=None):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              errors="replace")
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        return -1, "", f"timed out after {timeout} s"


def netcdf_reads(path: Path) -> bool:
    return _run(["ncdump", "-h", str(path)], timeout=60)[0] == 0


_UNLIMITED = re.compile(r"^(\s*\S+) = UNLIMITED ; // \((\d+) currently\)$", re.M)


def ncdump_view(path: Path) -> tuple[int, str]:
    status, out, err = _run(["ncdump", str(path)], timeout=120)
    body = out.split("\n", 1)[-1]  # the first line names the file
    return status, _UNLIMITED.sub(r"\1 = \2 ;", body) + ("\n" + err if status else "")


_MAXDIMS = re.compile(r"(DATASPACE\s+SIMPLE \{ \( [^)]*\) )/ \( [^)]*\) \}")
_ADDRESS = re.compile(r"\b(DATASET|GROUP|DATATYPE) \d+ (\"?/)")
# A reference whose target no link reaches prints no path (""): the kind h5dump prints before it is read from
# whatever bytes lie at the stored address. OMPS NO2 L2's dimension scales list datasets the subsetter
# dropped: at those addresses the input holds broken object headers (HDF5 2.0 cannot open them; h5dump
# still prints DATASET), the copy other bytes (h5dump prints numbers); a target that is a readable object
# is copied and compared by --verify (repack_hdf5._unlinked_target).
_UNNAMED_TARGET = re.compile(r'(?:\b(?:DATASET|GROUP|DATATYPE) \d+|\d+-\s*\d+) ""')
_H5DUMP_FILE = re.compile(r'^HDF5 "[^"]*" \{$', re.M)


def h5dump_view(path: Path, *options: str) -> tuple[int, str]:
    status, out, err = _run(["h5dump", *options, str(path)], timeout=120)
    out = _H5DUMP_FILE.sub("HDF5 {", out)
    out = _MAXDIMS.sub(r"\1}", out)
    out = _ADDRESS.sub(r"\1 \2", out)
    out = _UNNAMED_TARGET.sub('(a target no link reaches) ""', out)
    return status, out + ("\n" + err if status else "")


def first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}: {x.strip()[:100]!r} -> {y.strip()[:100]!r}"
    return f"{len(la)} lines -> {len(lb)} lines"


def layoutlab_command() -> list[str]:
    exe = Path(sys.executable).with_name("layoutlab")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "layoutlab.cli"]


def prepare(name: str, workdir: Path) -> tuple[dict, Path | None]:
    """A corpus file's row before layoutlab's copy: its input (built from a .cdl if it is one; None if that
    does not build, the row then says so) and whether h5repack repacks it (the reference)."""
    workdir.mkdir(parents=True, exist_ok=True)
    row: dict = {"file": name}
    src = build_input(name, workdir)
    if isinstance(src, str):
        row.update({"class": "not-built", "reason": src})
        return row, None
    ref_out = workdir / f"{Path(name).name}.h5repack.h5"
    status, _, err = _run(["h5repack", "-S", "PAGE", "-G", str(PAGE), str(src), str(ref_out)])
    row["h5repack"] = "ok" if status == 0 else "refused"
    if status:
        row["h5repack_error"] = (err.strip().splitlines() or [""])[0][:200]
    ref_out.unlink(missing_ok=True)
    return row, src


def judge(name: str, workdir: Path) -> dict:
    """One corpus file's outcome: ``class`` is one of preserved, silent-change, traceback,
    wrongly-refused (h5repack repacked it), refused (h5repack refused it too), better (only we
    repacked it, preserved), not-built (the .cdl does not build), bloated (output far larger than input)."""
    row, src = prepare(name, workdir)
    if src is None:
        return row
    our_out = workdir / f"{Path(name).name}.layoutlab.h5"
    env = dict(os.environ, LAYOUTLAB_STALL_SECONDS="30")
    status, out, err = _run([*layoutlab_command(), "repack", str(src), str(our_out), "--page-size", str(PAGE), "--verify"],
                            env=env)
    row["exit"] = status
    row["message"] = err.strip()[-400:]
    if "Traceback" in err or "Traceback" in out:
        row["class"] = "traceback"
        return row
    if status != 0:
        row["class"] = "wrongly-refused" if row["h5repack"] == "ok" else "refused"
        row["reason"] = (err.strip().splitlines() or [""])[-1][:300]
        return row
    return judge_copy(row, src, our_out)


def judge_all(names: list[str], workdir: Path, jobs: int = 2, timeout: float = 1800) -> list[dict]:
    """``judge`` for every file, with layoutlab's copies made as a user copies many files: one
    ``layoutlab repack IN... --out-dir DIR --json`` run (one process start, ``jobs`` files at once) instead
    of one process per file. Each input is linked under a name of its own (two corpus files share a name)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs) as pool:
        prepared = list(pool.map(lambda item: prepare(item[1], workdir / str(item[0])), enumerate(names)))
    links: dict[int, Path] = {}
    (workdir / "inputs").mkdir(parents=True, exist_ok=True)
    for i, (_, src) in enumerate(prepared):
        if src is not None:
            links[i] = workdir / "inputs" / f"{i:03d}__{Path(src).name}"
            links[i].symlink_to(Path(src).resolve())
    env = dict(os.environ, LAYOUTLAB_STALL_SECONDS="30")
    status, out, err = _run([*layoutlab_command(), "repack", *map(str, links.values()), "--out-dir",
                             str(workdir / "outputs"), "--jobs", str(jobs), "--page-size", str(PAGE), "--verify",
                             "--json"], timeout=timeout, env=env)
    try:
        records = {r["input"]: r for r in json.loads(out)["files"]}
    except (ValueError, KeyError) as error:
        raise AssertionError(f"layoutlab repack --out-dir gave no JSON report ({error}; exit {status}): "
                             f"{err[-2000:]}") from None

    def finish(item):
        i, (row, src) = item
        if src is None:
            return row
        record = records.get(str(links[i]))
        if record is None:
            return {**row, "class": "traceback", "message": f"not in the many-files report (exit {status})"}
        if record.get("written"):
            return judge_copy(row, src, Path(record["output"]))
        error = record.get("error") or f"skipped: {record.get('skipped')}"
        row["message"] = error[-400:]
        if "Traceback" in error or "--- in the worker process ---" in error:
            row["class"] = "traceback"
        else:
            row["class"] = "wrongly-refused" if row["h5repack"] == "ok" else "refused"
            row["reason"] = error.strip().splitlines()[0][:300] if error.strip() else ""
        return row

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(finish, enumerate(prepared)))


def judge_copy(row: dict, src: Path, our_out: Path) -> dict:
    """The row of a file layoutlab copied: its sizes, and its copy compared with it by ncdump or h5dump."""
    stat = our_out.stat()
    row["bytes_in"], row["bytes_out"], row["allocated_out"] = src.stat().st_size, stat.st_size, stat.st_blocks * 512
    if stat.st_size > 64 * src.stat().st_size + 64 * PAGE:
        row["class"] = "bloated"
        our_out.unlink()
        return row
    if netcdf_reads(src):
        row["judge"] = "ncdump"
        a, b = ncdump_view(src)[1], ncdump_view(our_out)[1]
        if a != b:
            a, b = _explained(src, our_out, a, b, row)
    else:
        row["judge"] = "h5dump"
        a, b = h5dump_view(src)[1], h5dump_view(our_out)[1]
    our_out.unlink()
    if a != b:
        row["class"] = "silent-change"
        row["difference"] = first_difference(a, b)
        return row
    row["class"] = "preserved" if row["h5repack"] == "ok" else "better"
    return row


def _tracks_attribute_order(path: Path) -> bool:
    import h5py

    with h5py.File(path, "r") as f:
        return bool(f["/"].id.get_create_plist().get_attr_creation_order() & h5py.h5p.CRT_ORDER_TRACKED)


def _explained(src: Path, out: Path, a: str, b: str, row: dict) -> tuple[str, str]:
    """ncdump views that differ only as the documented changes allow, made equal (``row["judge"]`` says how):

    - the input reads differently each time (values netCDF leaves undefined: no fill value, never
      written): judged by h5dump instead;
    - unlimited -> fixed: ncdump groups the values of a record variable in braces per record;
      braces dropped from both (h5dump still shows compound and vlen values exactly);
    - the input tracks no attribute creation order: ncdump lists attributes in the library's storage
      order, which a copy need not keep; lines compared as sorted lists."""
    if ncdump_view(src)[1] != a or "phony_dim_" in a:
        # (phony dimensions are named after the shapes netCDF sees: fixing an unlimited axis renames them)
        a, b = h5dump_view(src)[1], h5dump_view(out)[1]
        if h5dump_view(src)[1] != a:
            row["judge"] = "h5dump -H (the input's values read differently each time: never written, no fill value)"
            return h5dump_view(src, "-H")[1], h5dump_view(out, "-H")[1]
        row["judge"] = "h5dump (phony dimensions or unreproducible ncdump)"
        return a, b
    how = []
    if "UNLIMITED" in subprocess.run(["ncdump", "-h", str(src)], capture_output=True, text=True, errors="replace").stdout:
        a, b = re.sub(r"[{}]", "", a), re.sub(r"[{}]", "", b)
        how.append("record braces dropped")
    if not _tracks_attribute_order(src):
        a, b = "\n".join(sorted(a.splitlines())), "\n".join(sorted(b.splitlines()))
        how.append("lines sorted: attribute creation order not tracked")
    if how:
        row["judge"] = "ncdump (" + "; ".join(how) + ")"
    return a, b


def tools_missing() -> list[str]:
    return [tool for tool in TOOLS if not shutil.which(tool)]
