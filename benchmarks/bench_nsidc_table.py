"""NSIDC's ATL03 table reproduced in shape (issue 16, "Measured" bullet 1).

NSIDC's benchmark (nsidc/cloud-optimized-icesat2, hdf5-benchmarks/results/benchmarks.csv, us-west-2)
reads one beam's ``h_ph`` and averages it, from a 1 GB and a 7 GB ATL03 granule, with each tool on
each layout. This script does the same on ATL03-like granules (``layoutlab.samples.atl03``, sized by
``--sizes``) served by the local cloud with its emulated in-region latency (the S3 proxy's model,
as bench_access.py uses it: first-byte latency per request, bandwidth per request), one row per
column of NSIDC's table:

  h5py-default-original          original + h5py on s3fs, every library default
  h5py-aligned-rechunked-paged   rechunked + paged (100,000-photon chunks, 8 MiB pages, as NSIDC's
                                 ATL03 v7) + h5py with the aligned block cache and page buffer
  kerchunk-original              kerchunk references over the original (fsspec ReferenceFileSystem)
  kerchunk-rechunked-paged       kerchunk references over the rechunked + paged copy
  h5coro-original                h5coro on the original (it cannot read superblock version 3, which
                                 every paged file has: that attempt is recorded, not a row)
  xarray-tuned                   xarray (h5netcdf) on the rechunked + paged copy, 8 MiB blocks, page buffer
  xarray-naive                   xarray (h5netcdf) on the original as xarray opens an s3:// URL today

Each case is cold (a fresh process), on one core, ``--repeat`` times (repetitions the outer loop).
The pattern is ``beam-read`` with ``mean=true``: the record holds the mean, which must equal the
mean of the generator's values (``layoutlab.samples.atl03.photon_values``). Printed per size:
median wall s, requests, MB moved, over-read (moved / h_ph as stored), ratio to the best row beside
NSIDC's published ratio, and for every row the counts that explain its time. Results go to
``--json`` (default benchmarks/results/nsidc_table.json).

    .venv/bin/python benchmarks/bench_nsidc_table.py                   # 1 GB and 7 GB (7 GB: ~35 GB of disk)
    .venv/bin/python benchmarks/bench_nsidc_table.py --sizes 1GB
    .venv/bin/python benchmarks/bench_nsidc_table.py --sizes 30MB --repeat 1 --json /tmp/smoke.json   # seconds

Data generation runs at nice 19; the conversions (rechunk + page, references) are timed and recorded.
Generated files go to ``--workdir`` and are deleted at the end unless ``--keep``. The local cloud
(moto) keeps objects in memory; for a size whose original + rechunked copy do not fit in the memory
available (the 7 GB granule on a 24 GiB machine) it is started with its objects on disk
(``start_local_cloud(objects_on_disk_over=...)``: every object and upload part over 4 MiB in a
temporary file, multipart uploads joined on disk, a ranged GET a seek and a read) and the run
needs ~5x the size in free disk instead (local original + copy, the same two in the local cloud,
one upload's parts while they are joined); a size that fits in neither is refused with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import (  # noqa: E402
    add_run_options,
    ensure_bucket,
    floors,
    git_commit,
    log,
    machine,
    memory_available_bytes,
    moto_client,
    niced,
    prefix_bytes,
    run_repetitions,
    straight_to_moto,
    summarize,
)

BEAM = "gt1l"
PAGE_SIZE = 8 * 2**20
NSIDC_CHUNK_PHOTONS = 100_000
# write_atl03's output measured: 30.95 MB for 210,000 photons per beam (six beams) -> bytes per photon
BYTES_PER_PHOTON = 30.95e6 / 210_000
# moto holds each object in memory and joins a multipart upload's parts into one more copy, then bytes()
# of it: the rechunked copy (~1.35x the original) transiently needs ~3x its size, the original stays
MEMORY_FACTOR = 1.0 + 3 * 1.35
# Objects on disk: the two local files, the same two in the local cloud, one upload's parts while joined
DISK_FACTOR = 5.0
# Below S3's 5 MiB minimum part size, so every part of a multipart upload waits on disk too
OBJECTS_ON_DISK_OVER = 4 * 2**20

SOURCE = "nsidc/cloud-optimized-icesat2 hdf5-benchmarks/results/benchmarks.csv (us-west-2)"
# Published seconds per row: (low, high, where from). Ranges are NSIDC's spread over layouts/settings.
PUBLISHED = {
    "7GB": {
        "kerchunk-rechunked-paged": (17.3, 17.3, "kerchunk, rechunked-8mb references"),
        "kerchunk-original": (27.2, 27.2, "kerchunk, original references"),
        "h5py-aligned-rechunked-paged": (45.9, 45.9, "h5py cloud-aware, rechunked-8mb (best h5py)"),
        "h5coro-original": (52.6, 61.4, "h5coro over NSIDC's layouts (original 53.3)"),
        "xarray-tuned": (56.8, 56.8, "xarray cloud-aware, rechunked-8mb"),
        "h5py-default-original": (67.8, 67.8, "h5py not cloud-aware, original (csv row 39)"),
        "xarray-naive": (326.1, 434.8, "xarray on the original, not cloud-aware / cloud-aware"),
    },
    "1GB": {
        "kerchunk-rechunked-paged": (4.4, 4.4, "kerchunk, rechunked-8mb references"),
        "kerchunk-original": (5.3, 5.3, "kerchunk, original references"),
        "h5py-aligned-rechunked-paged": (11.8, 11.8, "h5py cloud-aware, rechunked-4mb (best h5py)"),
        "h5coro-original": (9.9, 19.1, "h5coro over NSIDC's layouts (original 15.0)"),
        "xarray-tuned": (21.6, 21.6, "xarray cloud-aware, page-only-8mb"),
        "h5py-default-original": (24.6, 24.6, "h5py not cloud-aware, original (csv row 34)"),
        "xarray-naive": (None, None, "not in the issue's table (csv rows 20/48: 295-359 s)"),
    },
}
# The csv's bytes_requested of the same runs (h5py and xarray only: fsspec's log), and the photons of
# NSIDC's gt1l: what NSIDC's readers moved, beside what the same reader moves here.
PUBLISHED_BYTES = {
    "7GB": {"h5py-default-original": 289_026_695, "h5py-aligned-rechunked-paged": 192_937_984,
            "xarray-tuned": 234_881_024, "xarray-naive": 3_350_528_419},
    "1GB": {"h5py-default-original": 99_747_204, "h5py-aligned-rechunked-paged": 67_108_864,
            "xarray-tuned": 117_440_512, "xarray-naive": 3_125_613_354},
}
PUBLISHED_PHOTONS = {"7GB": 46_484_912, "1GB": 9_720_204}


def published_table(size_bytes: int) -> str:
    return "7GB" if size_bytes >= 3e9 else "1GB"


def rows_for(urls: dict) -> list[dict]:
    page = PAGE_SIZE
    tuned_xarray = {"cache_type": "blockcache", "block_size": page, "maxblocks": 32,
                    "page_buf_size": 4 * page, "rdcc_nbytes": 2**20}
    params = {"beam": BEAM, "variable": "h_ph", "mean": True}
    rows = [
        ("h5py-default-original", "original + h5py default", "original", "h5py-s3fs-default", {}),
        ("h5py-aligned-rechunked-paged", "paged 8 MiB, 100k-photon chunks + h5py aligned", "rechunked-paged-8MiB",
         "h5py-s3fs-aligned", {}),
        ("kerchunk-original", "kerchunk over original", "kerchunk-original", "kerchunk-fsspec", {}),
        ("kerchunk-rechunked-paged", "kerchunk over rechunked + paged", "kerchunk-rechunked-paged-8MiB",
         "kerchunk-fsspec", {}),
        ("h5coro-original", "h5coro (original)", "original", "h5coro", {}),
        ("xarray-tuned", "tuned xarray (rechunked + paged)", "rechunked-paged-8MiB", "xarray-h5netcdf", tuned_xarray),
        ("xarray-naive", "naive xarray (original, xarray defaults)", "original", "xarray-h5netcdf", {}),
    ]
    return [{"key": key, "label": label, "variant": variant, "target": urls[variant], "reader": reader,
             "reader_options": options, "pattern": "beam-read", "params": params}
            for key, label, variant, reader, options in rows]


# -- data -------------------------------------------------------------------------
def generate_granule(path: str, photons: int) -> dict:
    from layoutlab.samples.atl03 import write_atl03

    started = time.perf_counter()
    write_atl03(path, photons=photons)
    return {"seconds": time.perf_counter() - started, "bytes": os.path.getsize(path)}


def source_mean(photons: int, seed: int) -> float:
    """The mean of the generator's h_ph for the beam (float64 sum of the float32 values, blockwise)."""
    import numpy as np

    from layoutlab.samples.atl03 import photon_values

    total, block = 0.0, 1_000_000
    for start in range(0, photons, block):
        values = photon_values(BEAM, start, min(photons, start + block), seed=seed)["h_ph"]
        total += float(np.sum(values, dtype="f8"))
    return total / photons


def nsidc_chunks(path: Path) -> dict:
    """100,000-photon chunks for every photon-rate dataset of every beam, as NSIDC's optimize.py."""
    import h5py

    chunks = {}
    with h5py.File(path, "r") as f:
        for beam in (k for k in f if k.startswith("gt")):
            for name, dataset in f[f"{beam}/heights"].items():
                if dataset.chunks:
                    chunks[f"{beam}/heights/{name}"] = (min(NSIDC_CHUNK_PHOTONS, dataset.shape[0]),) + dataset.shape[1:]
    return chunks


def stored_bytes(path: Path) -> int:
    import h5py

    with h5py.File(path, "r") as f:
        return int(f[f"{BEAM}/heights/h_ph"].id.get_storage_size())


def prepare_size(label: str, size: int, workdir: Path, cloud, s3) -> dict:
    """Generate, convert (timed) and upload one size; returns urls, conversions and facts."""
    from layoutlab.bench.runner import BENCH_BUCKET, upload_target
    from layoutlab.convert import virtual
    from layoutlab.convert.repack import repack

    photons = max(1000, round(size / BYTES_PER_PHOTON))
    original = workdir / f"atl03-{label}.h5"
    rechunked = workdir / f"atl03-{label}-rechunked-paged-8MiB.h5"
    facts = {"photons_per_beam": photons, "generated": None, "conversions": {}}
    if not original.exists():
        log(f"{label}: writing ATL03-like granule, {photons:,} photons per beam (nice 19)")
        facts["generated"] = niced(generate_granule, str(original), photons)
    if not rechunked.exists():
        log(f"{label}: rechunking photon datasets to {NSIDC_CHUNK_PHOTONS:,} photons, 8 MiB pages")
        started = time.perf_counter()
        summary = repack(original, rechunked, page_size=PAGE_SIZE, chunks=nsidc_chunks(original))
        facts["conversions"]["rechunked-paged-8MiB"] = {
            "seconds": time.perf_counter() - started, "bytes": rechunked.stat().st_size,
            "how": f"layoutlab repack: {len(summary.rechunked)} datasets to {NSIDC_CHUNK_PHOTONS} photons, "
                   f"page {PAGE_SIZE}", "notes": summary.notes}
    facts["file_bytes"] = {"original": original.stat().st_size, "rechunked-paged-8MiB": rechunked.stat().st_size}
    facts["h_ph_stored_bytes"] = {"original": stored_bytes(original),
                                  "rechunked-paged-8MiB": stored_bytes(rechunked)}
    import h5py

    with h5py.File(original, "r") as f:
        seed = int(f.attrs.get("seed", 0))
    facts["source_mean"] = source_mean(photons, seed)
    log(f"{label}: uploading {sum(facts['file_bytes'].values()) / 1e9:.2f} GB to the local cloud")
    urls = {"original": upload_target(original, cloud), "rechunked-paged-8MiB": upload_target(rechunked, cloud)}
    with straight_to_moto(cloud):
        for over, local in (("original", original), ("rechunked-paged-8MiB", rechunked)):
            name = f"kerchunk-{over}"
            target = f"s3://{BENCH_BUCKET}/references/{local.stem}.json"
            started = time.perf_counter()
            layout = virtual.build_layout(str(local), urls[over])
            written = virtual.write_kerchunk(layout, target, s3)
            record = layout.record()
            facts["conversions"][name] = {
                "seconds": time.perf_counter() - started, "bytes": written,
                "how": "VirtualiZarr HDF parser -> kerchunk JSON (Zarr v3 keys)",
                "virtual_arrays": record["virtual_arrays"], "virtual_chunks": record["virtual_chunks"],
                "inlined": len(record["inlined"]), "skipped": len(record["skipped"])}
            urls[name] = target
    facts["urls"] = urls
    facts["object_bytes"] = {name: prefix_bytes(s3, url) for name, url in urls.items()}
    return facts


# -- verdicts ------------------------------------------------------------------------
def zarr_concurrency() -> int:
    import zarr

    return int(zarr.config.get("async.concurrency"))


def verdicts(size: int, rows_run: list[dict], summaries: dict, facts: dict, latency_ms: float,
             bandwidth_mbps: float) -> dict:
    table = published_table(size)
    published = PUBLISHED[table]
    measured = {k: s["median_wall_s"] for k, s in summaries.items() if s.get("ok_runs")}
    best_key = min(measured, key=measured.get) if measured else None
    best = measured.get(best_key)
    pub_best = min(low for low, _high, _ in published.values() if low is not None)
    # the file whose h_ph the row reads (references read the bytes of the file they point into)
    over = {row["key"]: row["variant"].removeprefix("kerchunk-") for row in rows_run}
    rows_by_key = {row["key"]: row for row in rows_run}
    rows = {}
    for key, summary in summaries.items():
        low, high, source = published[key]
        wall = measured.get(key)
        ratio = wall / best if wall and best else None
        pub_ratio = (low / pub_best, high / pub_best) if low is not None else None
        within = (pub_ratio[0] / 2 <= ratio <= pub_ratio[1] * 2) if ratio and pub_ratio else None
        stored = facts["h_ph_stored_bytes"][over[key]]
        moved = summary.get("bytes_transferred")
        rows[key] = {
            "median_wall_s": wall, "ratio_to_best": ratio, "published_s": [low, high] if low is not None else None,
            "published_ratio": list(pub_ratio) if pub_ratio else None, "published_source": source,
            "ratio_within_2x": within, "h_ph_stored_bytes": stored,
            "published_bytes": PUBLISHED_BYTES[table].get(key),
            "moved_over_stored": moved / stored if moved and stored else None,
            "why": floors(summary, latency_ms, bandwidth_mbps),
            # zarr (over references) sends chunk reads concurrently: the latency floor is per batch of them
            "in_flight": zarr_concurrency() if rows_by_key[key]["reader"] == "kerchunk-fsspec" else None,
            "latency_ms": latency_ms,
        }
    # ordering: every pair NSIDC separates (ranges that do not overlap) in the same order here
    inversions = []
    keys = [k for k in summaries if published[k][0] is not None and k in measured]
    for a in keys:
        for b in keys:
            if published[a][1] < published[b][0] and measured[a] >= measured[b]:
                inversions.append(f"{a} ({measured[a]:.2f} s) not faster than {b} ({measured[b]:.2f} s); "
                                  f"published {published[a][1]:g} < {published[b][0]:g} s")
    means_ok = all(s.get("values_ok") for s in summaries.values())
    return {"published_table": table, "best_row": best_key, "best_s": best, "published_best_s": pub_best,
            "published_photons": PUBLISHED_PHOTONS[table],
            "rows": rows, "ordering_inversions": inversions, "ordering_met": not inversions,
            "ratios_met": all(r["ratio_within_2x"] is not False for r in rows.values()),
            "rows_outside_2x": [k for k, r in rows.items() if r["ratio_within_2x"] is False],
            "values_ok": means_ok}


def print_size(label: str, facts: dict, summaries: dict, verdict: dict, rows: list[dict]) -> None:
    print(f"\n== {label}: ATL03-like granule {facts['file_bytes']['original'] / 1e9:.2f} GB "
          f"({facts['photons_per_beam']:,} photons per beam), beam {BEAM} h_ph, mean {facts['source_mean']:.6f}; "
          f"published column: NSIDC {verdict['published_table']}")
    head = (f"{'row':44} {'median s':>9} {'requests':>8} {'MB moved':>9} {'moved/stored':>12} {'ratio':>6} "
            f"{'published':>13} {'pub. ratio':>11} {'2x?':>4} {'values':>6}")
    print(head)
    for row in rows:
        s, v = summaries[row["key"]], verdict["rows"][row["key"]]
        if not s.get("ok_runs"):
            print(f"{row['label']:44} failed: {'; '.join(s.get('errors') or [])[:200]}")
            continue
        pub = v["published_s"]
        pub_text = "—" if not pub else (f"{pub[0]:g} s" if pub[0] == pub[1] else f"{pub[0]:g}–{pub[1]:g} s")
        pr = v["published_ratio"]
        pr_text = "—" if not pr else (f"{pr[0]:.2f}" if pr[0] == pr[1] else f"{pr[0]:.1f}–{pr[1]:.1f}")
        ok = {True: "yes", False: "NO", None: "—"}[v["ratio_within_2x"]]
        print(f"{row['label']:44} {s['median_wall_s']:9.3f} {s['requests']:>8} "
              f"{(s['bytes_transferred'] or 0) / 1e6:9.1f} {v['moved_over_stored'] or 0:12.2f} "
              f"{v['ratio_to_best']:6.2f} {pub_text:>13} {pr_text:>11} {ok:>4} {'ok' if s['values_ok'] else 'BAD':>6}")
    print("why (measured counts of the median run; ! = ratio outside 2x of the published one):")
    for row in rows:
        v, s = verdict["rows"][row["key"]], summaries[row["key"]]
        mark = "!" if v["ratio_within_2x"] is False else " "
        print(f" {mark} {row['key']:30} {v['why']}")
        if v.get("in_flight"):
            print(f"   {'':30} zarr keeps up to {v['in_flight']} chunk requests in flight (async.concurrency): "
                  f">= {(s['requests'] or 0) * v['latency_ms'] / 1000 / v['in_flight']:.2f} s of first bytes; "
                  f"CPU {s.get('cpu_s') or 0:.2f} s on the one core (requests, decompression, decoding)")
        settings = s.get("reader_settings") or {}
        if settings.get("cache_type") and settings.get("block_size"):
            print(f"   {'':30} file cache {settings['cache_type']}, blocks of {settings['block_size'] / 2**20:g} MiB")
        if v.get("published_bytes"):
            print(f"   {'':30} NSIDC's run moved {v['published_bytes'] / 1e6:.1f} MB for "
                  f"{verdict['published_photons'] / 1e6:.2f} M photons; here {(s['bytes_transferred'] or 0) / 1e6:.1f} MB "
                  f"for {facts['photons_per_beam'] / 1e6:.2f} M")
    print(f"time scale: the best row ({verdict['best_row']}) takes {verdict['best_s']:.2f} s here, NSIDC's best "
          f"{verdict['published_best_s']:g} s ({verdict['published_best_s'] / verdict['best_s']:.1f}x as long); "
          f"every ratio above is to that row")
    print(f"ordering as published: {'yes' if verdict['ordering_met'] else 'no'}")
    for line in verdict["ordering_inversions"]:
        print(f"   {line}")
    print(f"ratios within 2x of published: {'yes' if verdict['ratios_met'] else 'no: ' + ', '.join(verdict['rows_outside_2x'])}")
    print(f"means equal the source's and every value checked: {'yes' if verdict['values_ok'] else 'NO'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1GB,7GB", help="granule sizes, comma-separated (default 1GB,7GB)")
    parser.add_argument("--objects-on-disk", action="store_true",
                        help="keep the local cloud's objects on disk even for sizes that fit in memory")
    add_run_options(parser, "/tmp/bench-nsidc-table", "nsidc_table.json", "granules")
    args = parser.parse_args(argv)
    from layoutlab.units import SizeError, parse_size, size_label

    try:
        sizes = [(text.strip(), parse_size(text.strip(), "--sizes")) for text in args.sizes.split(",") if text.strip()]
    except SizeError as error:
        parser.error(str(error))
    if not sizes or any(size < 1_000_000 for _, size in sizes):
        parser.error(f"--sizes {args.sizes!r}: give sizes of at least 1MB, e.g. 1GB,7GB")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    args.workdir.mkdir(parents=True, exist_ok=True)

    from layoutlab.bench.runner import BENCH_BUCKET
    from layoutlab.local.cloud import start_local_cloud
    from layoutlab.results.record import library_versions

    started, load_before = time.time(), os.getloadavg()
    net = {"latency_ms": args.latency_ms, "bandwidth_mbps": args.bandwidth_mbps}
    results, all_records, generated = {}, [], []
    for label, size in sizes:
        label = label.replace(" ", "")
        need, available = size * MEMORY_FACTOR, memory_available_bytes()
        on_disk_over = OBJECTS_ON_DISK_OVER if args.objects_on_disk else None
        if available is not None and need > available:
            on_disk_over = OBJECTS_ON_DISK_OVER
            disk_need = size * DISK_FACTOR
            disk_free = min(shutil.disk_usage(tempfile.gettempdir()).free, shutil.disk_usage(args.workdir).free)
            if disk_need > disk_free:
                reason = (f"{label}: not run: the original and its rechunked copy need ~{need / 1e9:.0f} GB of memory "
                          f"in the local cloud ({available / 1e9:.0f} GB available) or ~{disk_need / 1e9:.0f} GB of "
                          f"disk with its objects on disk ({disk_free / 1e9:.0f} GB free in {tempfile.gettempdir()} "
                          f"and {args.workdir})")
                log(reason)
                results[label] = {"size_bytes": size, "not_run": reason}
                continue
            log(f"{label}: ~{need / 1e9:.0f} GB would not fit in memory ({available / 1e9:.0f} GB available): "
                f"the local cloud keeps objects over {on_disk_over / 2**20:g} MiB on disk")
        cloud = start_local_cloud(latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps,
                                  objects_on_disk_over=on_disk_over)
        try:
            s3 = moto_client(cloud)
            ensure_bucket(s3, BENCH_BUCKET)
            generated += [args.workdir / f"atl03-{label}.h5", args.workdir / f"atl03-{label}-rechunked-paged-8MiB.h5"]
            facts = prepare_size(label, size, args.workdir, cloud, s3)
            rows = rows_for(facts["urls"])
            log(f"{label}: {len(rows)} rows x {args.repeat} cold repetitions")
            records = run_repetitions(rows, args.repeat, cloud, net, f"atl03-{label}")
            # h5coro on the paged copy: recorded, not a row (h5coro reads superblock versions 0-2 only)
            h5coro_paged = run_repetitions([{**rows[0], "key": "h5coro-rechunked-paged", "reader": "h5coro",
                                             "reader_options": {}, "variant": "rechunked-paged-8MiB",
                                             "target": facts["urls"]["rechunked-paged-8MiB"]}],
                                           1, cloud, net, f"atl03-{label}")["h5coro-rechunked-paged"][0]
        finally:
            cloud.stop()
        summaries = {row["key"]: summarize(records[row["key"]]) for row in rows}
        for row in rows:
            summaries[row["key"]]["means"] = [(r.get("result_summary") or {}).get("mean")
                                              for r in records[row["key"]] if r["status"] == "ok"]
            summaries[row["key"]]["mean_equals_source"] = bool(summaries[row["key"]]["means"]) and all(
                m is not None and math.isclose(m, facts["source_mean"], rel_tol=1e-9)
                for m in summaries[row["key"]]["means"])
            summaries[row["key"]]["values_ok"] = (summaries[row["key"]].get("values_ok", False)
                                                  and summaries[row["key"]]["mean_equals_source"])
        verdict = verdicts(size, rows, summaries, facts, args.latency_ms, args.bandwidth_mbps)
        results[label] = {
            "size_bytes": size, "size_label": size_label(size), "facts": facts,
            "local_cloud_objects": "in memory" if on_disk_over is None else f"on disk over {on_disk_over} bytes",
            "rows": [{"key": row["key"], "label": row["label"], "variant": row["variant"], "reader": row["reader"],
                      "reader_options": row["reader_options"], **summaries[row["key"]],
                      **verdict["rows"][row["key"]]} for row in rows],
            "verdict": {k: v for k, v in verdict.items() if k != "rows"},
            "h5coro_on_rechunked_paged": {"status": h5coro_paged["status"], "error": h5coro_paged.get("error"),
                                          "values_ok": h5coro_paged.get("checksum_ok")},
        }
        all_records += [r for rs in records.values() for r in rs] + [h5coro_paged]
        print_size(label, facts, summaries, verdict, rows)
        print(f"h5coro on the rechunked + paged copy: "
              f"{h5coro_paged.get('error') if h5coro_paged['status'] != 'ok' else 'read it'}")
    if not args.keep:
        for path in generated:
            path.unlink(missing_ok=True)
    load_after = os.getloadavg()
    command = " ".join([".venv/bin/python benchmarks/bench_nsidc_table.py"] + list(argv if argv is not None
                                                                                  else sys.argv[1:]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "benchmark": "bench_nsidc_table", "issue": 16, "command": command, "commit": git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(time.time() - started),
        "machine": machine(), "load_before": load_before, "load_after": load_after, "versions": library_versions(),
        "settings": {"sizes": [s for s, _ in sizes], "repeat": args.repeat, **net, "beam": BEAM,
                     "page_size": PAGE_SIZE, "chunk_photons": NSIDC_CHUNK_PHOTONS, "platform": "local-lambda",
                     "smoke": args.repeat < 3},
        "published": {"source": SOURCE, "seconds": PUBLISHED}, "sizes": results, "records": all_records,
    }, indent=1, default=str))
    print(f"\nbench_nsidc_table: {time.time() - started:.0f} s, load average before {load_before[0]:.2f} "
          f"after {load_after[0]:.2f} on {os.cpu_count()} cores; wrote {args.json}")
    ran = [r for r in results.values() if "rows" in r]
    bad = [r for r in ran if not r["verdict"]["values_ok"]]
    return 1 if bad or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
