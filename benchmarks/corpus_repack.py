#!/usr/bin/env python
"""The outcome table of ``layoutlab repack`` on the shared corpus (../shared/corpus), judged from outside.

Each file: h5repack -S PAGE -G 4194304, then ``layoutlab repack IN OUT --page-size 4194304``
(verifying, as the CLI does by default), then ncdump / h5dump of input and output compared
(tests/repack_corpus.py says exactly what is normalised). Writes one row per file and the counts
per class to ``--json`` (default benchmarks/results/corpus_repack.json).

    .venv/bin/python benchmarks/corpus_repack.py --jobs 2
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import repack_corpus  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "corpus_repack.json"))
    parser.add_argument("--only", default="", help="substring of the corpus names to run")
    args = parser.parse_args()
    missing = repack_corpus.tools_missing()
    if missing:
        print(f"missing tools: {missing}", file=sys.stderr)
        return 2
    names = [n for n in repack_corpus.corpus_files() if args.only in n]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda item: repack_corpus.judge(item[1], Path(tmp) / str(item[0])),
                             enumerate(names)))
    counts = collections.Counter(row["class"] for row in rows)
    for row in rows:
        if row["class"] not in ("preserved", "better"):
            detail = row.get("reason") or row.get("difference") or row.get("message", "")[-200:]
            print(f"{row['class']:16} {row['file']}: {detail}")
    print(dict(sorted(counts.items())), f"{len(rows)} files, {time.perf_counter() - started:.0f} s")
    result = {
        "command": "python benchmarks/corpus_repack.py --jobs %d" % args.jobs,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "seconds": round(time.perf_counter() - started, 1),
        "counts": dict(sorted(counts.items())),
        "rows": rows,
    }
    if not args.only:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
