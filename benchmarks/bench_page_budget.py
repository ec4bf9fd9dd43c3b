#!/usr/bin/env python
"""The page-size model against the repack: predicted vs actual size of paged copies (issue 17).

For the samples (ATL03-like and GEOS-like, small and the demo's sizes), any ``--file`` given and the
shared corpus's HDF5 / NetCDF-4 files, each repacked (``layoutlab.convert.repack.repack``, no
verification) at every ``--pages`` size beside ``page_budget.predict``'s size, and what
``choose_page_size`` picks within ``--budget``. Prints a markdown table and writes
``--json`` (default benchmarks/results/page_budget.json).

    nice -n 19 .venv/bin/python benchmarks/bench_page_budget.py --file /tmp/big/atl03.h5 --file /tmp/big/geos.nc
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

PAGES = (4096, 65536, 262144, 1048576, 4194304, 8388608)
# (label, writer, keyword arguments): the demo's granule and grid (commands/demo.py), smaller ones,
# and the GEOS-like sample at its default shape
SAMPLES = (
    ("atl03 20k photons/beam", "atl03", {"photons": 20_000}),
    ("atl03 200k photons/beam (demo)", "atl03", {"photons": 200_000}),
    ("geos 240x91x144 (demo)", "geos", {"shape": (240, 91, 144)}),
    ("geos 240x181x288 (default)", "geos", {"shape": (240, 181, 288)}),
)


def write_samples(workdir: Path) -> list[tuple[str, Path]]:
    from layoutlab.samples import atl03, geos

    made = []
    for label, kind, options in SAMPLES:
        name = label.split(" (")[0].replace(" ", "-").replace("/", "") + (".h5" if kind == "atl03" else ".nc")
        path = workdir / name
        if not path.exists():
            (atl03.write_atl03 if kind == "atl03" else geos.write_geos)(path, **options)
        made.append((label, path))
    return made


def corpus_files() -> list[tuple[str, Path]]:
    import shared_corpus

    from layoutlab.formats.sniff import HEAD_BYTES, hdf5_signature_offset

    files = []
    for path in shared_corpus.binary_files():
        with open(path, "rb") as stream:
            if hdf5_signature_offset(stream.read(HEAD_BYTES)) is not None:
                files.append((shared_corpus.label(path), path))
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None, help="where samples are written (default: a temporary directory)")
    parser.add_argument("--file", action="append", default=[], help="another file to measure (repeatable)")
    parser.add_argument("--pages", default=",".join(map(str, PAGES)), help="page sizes in bytes, comma-separated")
    parser.add_argument("--budget", default="5%")
    parser.add_argument("--no-corpus", action="store_true", help="leave the shared corpus out")
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "page_budget.json"))
    args = parser.parse_args()
    from layoutlab.convert.page_budget import choose_page_size, compare_with_repack, parse_budget
    from layoutlab.errors import UserError

    pages = [int(p) for p in args.pages.split(",")]
    budget = parse_budget(args.budget)
    with tempfile.TemporaryDirectory(prefix="page-budget-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        files = write_samples(workdir) + [(Path(f).name, Path(f)) for f in args.file]
        files += [] if args.no_corpus else corpus_files()
        rows, choices = [], []
        for label, path in files:
            started = time.perf_counter()
            try:
                choice = choose_page_size(path, budget)
            except UserError as error:
                print(f"{label}: {error}", file=sys.stderr)
                continue
            choose_s = time.perf_counter() - started
            try:
                found = compare_with_repack(path, pages, scratch)
            except UserError as error:  # a file the repack refuses (the corpus has some): no row to compare
                print(f"{label}: not repacked: {error}", file=sys.stderr)
                continue
            choices.append({"file": label, "input_bytes": path.stat().st_size, "page_size": choice.page_size,
                            "reason": choice.reason, "predicted_overhead": choice.predicted_overhead,
                            "choose_s": round(choose_s, 3)})
            rows += [{**row, "file": label} for row in found]
    print("| file | MB | page | predicted | actual | error (pages) |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['file']} | {row['input_bytes'] / 1e6:.2f} | {row['page_size'] // 1024} KiB "
              f"| {row['predicted_overhead']:+.1%} | {row['actual_overhead']:+.1%} "
              f"| {row['error_bytes'] / row['page_size']:+.0f} |")
    print(f"\n| file | MB | chosen within {budget:.0%} | why |\n|---|---:|---|---|")
    for choice in choices:
        page = f"{choice['page_size'] // 1024} KiB" if choice["page_size"] else "skip"
        print(f"| {choice['file']} | {choice['input_bytes'] / 1e6:.2f} | {page} | {choice['reason']} |")
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
              "load_average": os.getloadavg(), "command": " ".join(sys.argv), "budget": budget,
              "rows": rows, "choices": choices}
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
