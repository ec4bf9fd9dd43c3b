"""``layoutlab repack`` against h5repack (and h5repack + h5diff) on the real granules of the shared corpus.

For each real product (``../shared/corpus`` beside the repo, or ``LAYOUTLAB_CORPUS``: products/*,
icesat2/ATL06*, gpm/*.HDF5):

- one file, checked: ``layoutlab repack IN OUT --page-size 8MiB`` (verified, the default) against
  ``h5repack -S PAGE -G 8388608 IN OUT && h5diff IN OUT``;
- one file, unchecked: ``layoutlab repack ... --no-verify`` against ``h5repack -S PAGE -G 8388608``;
- many files (``--copies`` copies of the product): ``layoutlab repack DIR --out-dir OUT`` (verified, and
  ``--no-verify``) against a shell loop of ``h5repack`` (and of ``h5repack && h5diff``) over the same files.

Each pair runs in turn (A B A B ...) ``--repeat`` times; the figure quoted is the median of the pairwise
ratios A/B of wall time (and of CPU time: user + system of the process and everything it waited for).
Writes ``benchmarks/results/bench_real-<date>.json`` and prints a markdown table.

    python benchmarks/bench_real.py [--repeat 5] [--copies 20] [--many-repeat 3] [--only ATL06]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from layoutlab import settings

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(settings.value("LAYOUTLAB_CORPUS") or REPO.parent / "shared" / "corpus")
PAGE = 8 << 20


def real_products(corpus: Path = CORPUS) -> list[Path]:
    files = [*sorted((corpus / "products").glob("*")), *sorted((corpus / "icesat2").glob("ATL06*")),
             *sorted((corpus / "gpm").glob("*.HDF5"))]
    return [path for path in files if path.is_file()]


def layoutlab_command() -> list[str]:
    script = Path(sys.executable).parent / "layoutlab"
    return [str(script)] if script.exists() else [sys.executable, "-m", "layoutlab.cli"]


def timed(command: str) -> dict:
    """Run ``command`` in a shell; its wall seconds, CPU seconds (it and every process it waited for) and exit
    status. Its output is discarded."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    status = subprocess.run(command, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "exit": status.returncode, "stderr": status.stderr[-400:]}


def pair(ours: str, reference: str, repeat: int, before=None, warmup: int = 1) -> dict:
    """``ours`` and ``reference`` in turn, ``repeat`` times each after ``warmup`` uncounted runs of each; medians
    and the median of the pairwise ratios."""
    runs = []
    for index in range(repeat + warmup):
        if before:
            before()
        a = timed(ours)
        if before:
            before()
        b = timed(reference)
        if index >= warmup:  # (the first pair warms the page cache and the interpreter's files)
            runs.append((a, b))
    def median(side, key):
        return statistics.median(run[side][key] for run in runs)
    return {
        "ours": ours, "reference": reference, "pairs": len(runs),
        "ours_wall": median(0, "wall"), "reference_wall": median(1, "wall"),
        "ours_cpu": median(0, "cpu"), "reference_cpu": median(1, "cpu"),
        "ratio_wall": statistics.median(a["wall"] / b["wall"] for a, b in runs),
        "ratio_cpu": statistics.median(a["cpu"] / b["cpu"] for a, b in runs if b["cpu"] > 0) if runs else None,
        "ours_exit": sorted({a["exit"] for a, _ in runs}), "reference_exit": sorted({b["exit"] for _, b in runs}),
        "ours_error": next((a["stderr"] for a, _ in runs if a["exit"]), ""),
        "reference_error": next((b["stderr"] for _, b in runs if b["exit"]), ""),
    }


def bench_one(path: Path, work: Path, repeat: int) -> dict:
    lab = shlex.join(layoutlab_command())
    src, ours_out, ref_out = shlex.quote(str(path)), shlex.quote(str(work / "ours.h5")), shlex.quote(str(work / "ref.h5"))
    h5repack = f"h5repack -S PAGE -G {PAGE} {src} {ref_out}"
    return {
        "verified": pair(f"{lab} repack {src} {ours_out} --page-size 8MiB", f"{h5repack} && h5diff {src} {ref_out}", repeat),
        "no_verify": pair(f"{lab} repack {src} {ours_out} --page-size 8MiB --no-verify", h5repack, repeat),
    }


def bench_many(path: Path, work: Path, copies: int, repeat: int, warmup: int) -> dict:
    """``copies`` copies of ``path`` in one folder: one layoutlab run against a shell loop of the reference."""
    folder = work / "many-in"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for index in range(copies):
        shutil.copyfile(path, folder / f"{index:03d}-{path.name}")
    lab = shlex.join(layoutlab_command())
    ours_dir, ref_dir = work / "many-ours", work / "many-ref"

    def clear() -> None:
        for directory in (ours_dir, ref_dir):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()

    loop = f'for f in {shlex.quote(str(folder))}/*; do h5repack -S PAGE -G {PAGE} "$f" {shlex.quote(str(ref_dir))}/"$(basename "$f")"'
    out = shlex.quote(str(ours_dir))
    return {
        "files": copies,
        "verified": pair(f"{lab} repack {shlex.quote(str(folder))} --out-dir {out} --page-size 8MiB",
                         f'{loop} && h5diff "$f" {shlex.quote(str(ref_dir))}/"$(basename "$f")" || exit 1; done',
                         repeat, before=clear, warmup=warmup),
        "no_verify": pair(f"{lab} repack {shlex.quote(str(folder))} --out-dir {out} --page-size 8MiB --no-verify",
                          f"{loop} || exit 1; done", repeat, before=clear, warmup=warmup),
    }


def objects(path: Path) -> dict:
    import h5py

    counts = {"datasets": 0, "groups": 0}
    with h5py.File(path, "r") as f:
        f.visititems(lambda _, obj: counts.__setitem__(
            "datasets" if isinstance(obj, h5py.Dataset) else "groups",
            counts["datasets" if isinstance(obj, h5py.Dataset) else "groups"] + 1))
    return counts


def table(rows: list[dict]) -> str:
    def ratio(figure):
        if figure is None:
            return "-"
        text = f"{figure['ratio_wall']:.2f}x ({figure['ratio_cpu']:.2f}x)" if figure["ratio_cpu"] else f"{figure['ratio_wall']:.2f}x"
        bad = [code for code in figure["ours_exit"] + figure["reference_exit"] if code]
        return text + (f" exit {figure['ours_exit']}/{figure['reference_exit']}" if bad else "")
    lines = ["| product | MB | datasets | verified vs h5repack+h5diff | --no-verify vs h5repack | "
             "many: verified vs loop h5repack+h5diff | many: --no-verify vs loop h5repack |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        many = row.get("many") or {}
        lines.append(f"| {row['product'][:40]} | {row['bytes'] / 1e6:.1f} | {row['datasets']} | {ratio(row['one']['verified'])} | "
                     f"{ratio(row['one']['no_verify'])} | {ratio(many.get('verified'))} | {ratio(many.get('no_verify'))} |")
    lines.append("")
    lines.append("ratio: median of the pairwise ratios of wall time (of CPU time in parentheses), layoutlab / reference; "
                 "< 1 is layoutlab faster.")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="pairs per one-file comparison (default 5)")
    parser.add_argument("--copies", type=int, default=20, help="copies of each product in the many-files run")
    parser.add_argument("--many-repeat", type=int, default=3, help="pairs per many-files comparison (0: none)")
    parser.add_argument("--many-warmup", type=int, default=1, help="uncounted pairs before them (default 1)")
    parser.add_argument("--only", action="append", default=[], help="only products whose name contains this")
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write (default benchmarks/results/bench_real-<date>.json)")
    args = parser.parse_args(argv)
    if not shutil.which("h5repack") or not shutil.which("h5diff"):
        print("bench_real: h5repack and h5diff are needed (Debian hdf5-tools: make sysdeps)", file=sys.stderr)
        return 2
    products = [p for p in real_products() if not args.only or any(word in p.name for word in args.only)]
    if not products:
        print(f"bench_real: no real product found under {CORPUS}", file=sys.stderr)
        return 2
    from bench_support import fresh_bytecode

    fresh_bytecode()  # (the commands timed start from the modules as they are now, not the compiler)
    rows = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out = args.json or REPO / "benchmarks" / "results" / f"bench_real-{started[:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"started": started, "finished": None, "load_at_start": os.getloadavg(), "load_at_end": None,
              "machine": platform.platform(), "cores": os.cpu_count(),
              "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
              "repeat": args.repeat, "copies": args.copies, "many_repeat": args.many_repeat,
              "many_warmup": args.many_warmup, "products": rows}
    with tempfile.TemporaryDirectory(prefix="bench-real-") as tmp:
        for path in products:
            work = Path(tmp)
            print(f"[{time.strftime('%H:%M:%S')}] {path.name}", file=sys.stderr, flush=True)
            row = {"product": path.name, "path": str(path), "bytes": path.stat().st_size, **objects(path),
                   "one": bench_one(path, work, args.repeat)}
            if args.many_repeat:
                row["many"] = bench_many(path, work, args.copies, args.many_repeat, args.many_warmup)
            rows.append(row)
            # (written after each product: a long run stopped part-way keeps what it measured)
            record.update(finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), load_at_end=os.getloadavg())
            out.write_text(json.dumps(record, indent=2) + "\n")
            print(table(rows[-1:]).splitlines()[-3], file=sys.stderr, flush=True)
    print(table(rows))
    print(f"\nwritten {out}; load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
