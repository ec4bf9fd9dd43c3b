"""Writes decision_cases.json.gz: record sets and what ``decide`` answered for them, pinned before the
rules of report/decision.py were rewritten as named rules (issue 26), so that the rewrite could be shown
to give the same recommendation, word for word, for the same records.

Two sources: every record set the unit tests tests/unit/test_report_*.py and test_decision_*.py pass to
``decide`` (captured by wrapping it during a run of those tests, ``--captured calls.json``), and record
sets drawn here from a seeded generator, varied so that every rule fires alone and in sequence
(dominated variants, measurably better rivals, an original no variant beats, cheaper equivalents,
rivals the evidence cannot separate), with and without a workload mix and VARIANT items.

Run it only to pin a NEW behaviour on purpose: the file it writes is the reference the test compares with.
    .venv/bin/python tests/unit/data/make_decision_cases.py --captured calls.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from layoutlab.report.decision import decide

HERE = Path(__file__).parent
PLATFORMS = {"local-lambda": {"name": "local-lambda", "kind": "lambda", "memory_mb": 1769, "local": True},
             "local-fargate": {"name": "local-fargate", "kind": "fargate", "memory_mb": 2048, "vcpu": 1,
                               "local": True}}
PATTERN_SETS = (("timeseries-point", "map-timestep"), ("beam-read",),
                ("timeseries-point", "map-timestep", "timeseries-region-mean"))
ORIGINAL_BYTES = 30_000_000
# name -> (variant_kind, readers, size factor of the original, GETs per read)
KINDS = {
    "original": ("original", ("h5py-s3fs-default", "h5py-s3fs-aligned"), 1.0, 40),
    "paged-8MiB": ("repack-paged", ("h5py-s3fs-default", "h5py-s3fs-aligned"), 1.4, 4),
    "kerchunk-original": ("virtual-kerchunk", ("kerchunk-fsspec",), 0.03, 4),
    "zarr-a": ("rechunk-zarr", ("zarr-obstore",), 1.1, 6),
    "zarr-b": ("rechunk-zarr", ("zarr-obstore",), 1.05, 8),
    "icechunk-virtual": ("virtual-icechunk", ("icechunk",), 0.02, 5),
}
SPREADS = ((1.0, 1.01, 0.99), (1.0, 1.01, 0.99), (1.0, 2.0, 0.67), (1.0, 1.08, 0.93, 1.04, 0.96),
           (1.0, 1.08, 0.93, 1.04, 0.96), (1.0,), (1.0, 1.3, 0.9))


def generated_case(rng: random.Random) -> dict:
    patterns = rng.choice(PATTERN_SETS)
    names = ["original"] + rng.sample([n for n in KINDS if n != "original"], rng.randint(1, 4))
    platforms = rng.sample(sorted(PLATFORMS), rng.randint(1, 2))
    base = {p: rng.uniform(0.5, 2.0) for p in patterns}
    # medians: near the original, near each other, or far apart, so that verdicts of every kind occur
    factor = {(n, p): (1.0 if n == "original" else rng.choice((0.2, 0.2, 0.21, 0.3, 0.31, 0.33, 0.5, 0.95, 1.2, 3.0)))
              for n in names for p in patterns}
    rss = {n: rng.choice((150.0, 150.0, 90.0, 300.0)) for n in names}
    records = []
    for platform in platforms:
        for name in names:
            kind, readers, _, gets = KINDS[name]
            for pattern in patterns:
                spread = rng.choice(SPREADS)
                for reader_index, reader in enumerate(readers):
                    slower = 1.0 + 0.5 * reader_index * rng.random()
                    for rep, noise in enumerate(spread):
                        records.append({
                            "kind": "RESULT", "dataset": "generated", "variant": name, "pattern": pattern,
                            "reader": reader, "platform": platform, "platform_profile": PLATFORMS[platform],
                            "repetition": rep, "wall_s": base[pattern] * factor[(name, pattern)] * slower * noise,
                            "checksum_ok": rng.choice((True, True, True, None)), "status": "ok",
                            "peak_rss_mb": rss[name], "requests": gets,
                            "get_requests": gets, "head_requests": 0, "request_counting": "proxy"})
    if rng.random() < 0.1:
        records[0] = {**records[0], "checksum_ok": False}
    case: dict = {"records": records}
    if rng.random() < 0.8:
        variants = {}
        for name in names:
            kind, _, size, _ = KINDS[name]
            item = {"variant": name, "variant_kind": kind, "status": "READY",
                    "size_bytes": int(ORIGINAL_BYTES * size * rng.uniform(0.9, 1.1))}
            if name != "original":
                item.update(source_bytes=ORIGINAL_BYTES, convert_s=round(rng.uniform(0.5, 8.0), 2),
                            platform=platforms[0], spec={"kind": kind})
                if kind == "virtual-kerchunk":
                    item["spec"]["over"] = "original"
            variants[name] = item
        case["variants"] = variants
    if rng.random() < 0.3:
        shares = [rng.randint(1, 9) for _ in patterns]
        case["mix"] = {p: s / sum(shares) for p, s in zip(patterns, shares)}
    return case


def pinned(inputs: dict) -> dict:
    options = {k: v for k, v in inputs.items() if k != "records"}
    return {"inputs": inputs, "decided": json.loads(json.dumps(decide(inputs["records"], **options)))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--captured", type=Path, required=True, help="the unit tests' decide() inputs, a JSON list")
    parser.add_argument("--generated", type=int, default=120)
    args = parser.parse_args()
    captured = [c["inputs"] for c in json.loads(args.captured.read_text())]
    rng = random.Random(26)
    cases = [pinned(inputs) for inputs in captured] + [pinned(generated_case(rng)) for _ in range(args.generated)]
    text = json.dumps(cases, separators=(",", ":")).encode()  # key order kept: a mix's order is its sentence's
    with gzip.GzipFile(HERE / "decision_cases.json.gz", "wb", mtime=0) as out:
        out.write(text)
    print(f"{len(cases)} cases, {len(text):,} bytes of JSON")


if __name__ == "__main__":
    main()
