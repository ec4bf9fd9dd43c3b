#!/usr/bin/env python
"""The floor of a verified repack (issue 37): stock zlib inflating every stored chunk of a file, one
process per core.

A verified ``layoutlab repack`` decodes every stored chunk of its input (a damaged compressed chunk is
named, nothing written); no copy that does so can take less time than the inflating alone. This script
does only that, as fast as a plain program can on this machine: it lists every chunk of every chunked
dataset (HDF5's own chunk index through h5py's ``chunk_iter``), splits them into one contiguous share of
the stored bytes per process, and each process reads its chunks with ``pread`` and inflates those whose
deflate filter was applied with the standard library's ``zlib`` (the build Python links: stock zlib).
Other filters (shuffle, fletcher32) cost next to nothing and are not undone: this is a floor.

    python benchmarks/inflate_floor.py IN.h5 [--processes N] [--json]

prints the whole run's seconds (start, listing, reading, inflating) and the inflate part; with
``--json`` one JSON object (``bench_repack.py`` reads it). Exit status 1 if a chunk does not inflate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib

H5Z_FILTER_DEFLATE = 1


def stored_chunks(path: str) -> list[tuple[int, int, bool, int]]:
    """(file offset, stored size, deflated?, declared chunk bytes) of every stored chunk, in file order."""
    import h5py

    chunks: list[tuple[int, int, bool, int]] = []
    with h5py.File(path, "r") as f:
        datasets = []
        f.visititems(lambda _, obj: datasets.append(obj) if isinstance(obj, h5py.Dataset) and obj.chunks else None)
        for dataset in datasets:
            plist = dataset.id.get_create_plist()
            filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
            deflate_bit = 1 << filters.index(H5Z_FILTER_DEFLATE) if H5Z_FILTER_DEFLATE in filters else 0
            chunk_bytes = dataset.dtype.itemsize
            for length in dataset.chunks:
                chunk_bytes *= length
            dataset.id.chunk_iter(lambda info: chunks.append(
                (info.byte_offset, info.size, bool(deflate_bit) and not info.filter_mask & deflate_bit, chunk_bytes)))
    chunks.sort()
    return chunks


def shares(chunks: list, processes: int) -> list[list]:
    """``processes`` contiguous runs of ``chunks`` holding about the same stored bytes each."""
    total = sum(size for _, size, _, _ in chunks) or 1
    out: list[list] = [[] for _ in range(processes)]
    done = 0
    for chunk in chunks:
        out[min(processes - 1, done * processes // total)].append(chunk)
        done += chunk[1]
    return out


def inflate(path: str, share: list) -> tuple[int, int]:
    """Read and inflate ``share``; (chunks inflated, bytes they inflate to). ValueError names a chunk that
    does not inflate to its declared size."""
    fd = os.open(path, os.O_RDONLY)
    inflated = out_bytes = 0
    try:
        for offset, size, deflated, chunk_bytes in share:
            raw = os.pread(fd, size, offset)
            if deflated:
                value = zlib.decompress(raw, bufsize=chunk_bytes)
                inflated += 1
                out_bytes += len(value)
    finally:
        os.close(fd)
    return inflated, out_bytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", help="HDF5 / NetCDF-4 file")
    parser.add_argument("--processes", type=int, default=len(os.sched_getaffinity(0)),
                        help="processes inflating at once (default: the cores this process may use)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error("--processes must be at least 1")
    started = time.perf_counter()
    chunks = stored_chunks(args.path)
    listed = time.perf_counter()
    pipes, children = [], []
    for share in shares(chunks, args.processes):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                answer = {"ok": inflate(args.path, share)}
            except (zlib.error, ValueError) as error:
                answer = {"error": str(error)}
            os.write(write_end, json.dumps(answer).encode())
            os._exit(0)
        os.close(write_end)
        pipes.append(read_end)
        children.append(pid)
    answers = []
    for pid, read_end in zip(children, pipes):
        data = b""
        while block := os.read(read_end, 1 << 16):
            data += block
        os.close(read_end)
        os.waitpid(pid, 0)
        answers.append(json.loads(data or b'{"error": "the process ended without an answer"}'))
    finished = time.perf_counter()
    errors = [a["error"] for a in answers if "error" in a]
    result = {"path": args.path, "processes": args.processes, "chunks": len(chunks),
              "stored_bytes": sum(size for _, size, _, _ in chunks),
              "chunks_inflated": sum(a["ok"][0] for a in answers if "ok" in a),
              "inflated_bytes": sum(a["ok"][1] for a in answers if "ok" in a),
              "list_seconds": round(listed - started, 4), "inflate_seconds": round(finished - listed, 4),
              "seconds": round(finished - started, 4), "errors": errors}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.path}: {result['chunks']} chunks ({result['stored_bytes'] / 1e6:.1f} MB stored), "
              f"{result['chunks_inflated']} inflated to {result['inflated_bytes'] / 1e6:.1f} MB by {args.processes} "
              f"processes: {result['inflate_seconds']:.3f} s (listing {result['list_seconds']:.3f} s)")
        for error in errors:
            print(f"  a chunk did not inflate: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
