"""``layoutlab repack IN... --out-dir DIR``: many files in one run.

One process starts (and imports h5py and numpy) once; each file is repacked in its own guarded child
(layoutlab/guard.py: a file that crashes or spins libhdf5 is that file's error, as for a single repack),
forked from a parent that has already imported everything, so a file costs a fork, not a Python start;
the child holds no credentials and, verifying, decodes the file's chunks itself (no second child).
Up to ``workers`` children run at once. A file that fails is reported and the others go on.
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

from layoutlab.errors import UserError

GLOB_CHARACTERS = frozenset("*?[")


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def expand_inputs(arguments: list[str]) -> list[Path]:
    """Files as given, the regular files directly inside a directory (sorted, hidden ones left out), and the
    matches of a glob pattern (sorted); each input once. ``UserError`` for an argument naming nothing."""
    found: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")))
        elif path.exists() or not GLOB_CHARACTERS & set(argument):
            found.append(path)  # (a missing file is that file's error, reported with the others)
        else:
            matches = sorted(Path(m) for m in glob.glob(argument) if Path(m).is_file())
            if not matches:
                raise UserError(f"{argument}: no file matches this pattern")
            found.extend(matches)
    unique, seen = [], set()
    for path in found:
        key = os.path.abspath(path)
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def output_paths(inputs: list[Path], out_dir: Path) -> list[Path]:
    """``out_dir / name`` for each input; ``UserError`` when two inputs share a name (one would
    overwrite the other's copy)."""
    by_name: dict[str, Path] = {}
    for path in inputs:
        if path.name in by_name:
            raise UserError(f"{path} and {by_name[path.name]}: the same file name, one copy in {out_dir} "
                            "would overwrite the other")
        by_name[path.name] = path
    return [out_dir / path.name for path in inputs]


class FileResult:
    """One file's outcome: the summary of its copy, the page-size choice that skipped it, or its error."""

    def __init__(self, input: Path, output: Path, summary=None, skipped: str | None = None,
                 error: str | None = None, seconds: float = 0.0):
        self.input, self.output, self.summary = input, output, summary
        self.skipped, self.error, self.seconds = skipped, error, seconds

    @property
    def failed(self) -> bool:
        return self.error is not None

    def line(self) -> str:
        if self.error is not None:
            # (errors about a file name it first: said once)
            return f"FAILED {self.error}" if self.error.startswith(str(self.input)) else f"FAILED {self.input}: {self.error}"
        if self.skipped is not None:
            return f"skipped {self.input}: paging skipped ({self.output} not written): {self.skipped}"
        s = self.summary
        check = (f"verified ({s.verify_seconds:.2f} s)" if s.verified else "not verified (--no-verify)")
        return (f"ok {self.input} -> {self.output}: {s.output_bytes / 1e6:.1f} MB from {s.input_bytes / 1e6:.1f} MB "
                f"({s.size_overhead:+.1%}), {s.page_size // 1024} KiB pages, {s.datasets} datasets, {check}, "
                f"{self.seconds:.2f} s")

    def record(self) -> dict:
        out = {"input": str(self.input), "output": str(self.output), "seconds": round(self.seconds, 3)}
        if self.error is not None:
            return {**out, "written": False, "error": self.error}
        if self.skipped is not None:
            return {**out, "written": False, "skipped": self.skipped}
        return {**out, "written": True, **self.summary.to_dict()}


def _repack_one(in_path: str, out_path: str, page_size, budget, options: dict):
    """In the guarded child: the page size chosen when ``page_size`` is None (``auto``), then the repack.
    Returns ("skipped", reason) or ("written", summary)."""
    from layoutlab.convert.repack import repack

    if page_size is None:
        from layoutlab.convert.page_budget import choose_page_size

        choice = choose_page_size(in_path, budget, target_chunk_bytes=options.get("target_chunk_bytes"))
        if choice.skip:
            return ("skipped", choice.reason)
        page_size = choice.page_size
    return ("written", repack(in_path, out_path, page_size=page_size, **options))


def repack_many(inputs: list[Path], outputs: list[Path], page_size: int | None, budget: float, options: dict,
                workers: int, report=None) -> list[FileResult]:
    """Repack each input into its output, up to ``workers`` at once, each in a guarded child; ``report(result)``
    is called for each file in the order given, as soon as it and those before it are done."""
    # What a child imports on its first repack, imported once here: the children inherit it (h5py and numpy;
    # the modules repack imports when it runs, ~4 ms of each child's time on a small granule otherwise).
    from layoutlab.convert import allocation, fastcopy, repack, repack_hdf5  # noqa: F401
    fastcopy.available()  # (the C loops' library loaded and bound to h5py's libhdf5)
    if options.get("verify"):
        from layoutlab.convert import decode_check  # noqa: F401
    from layoutlab.convert.repack_common import partial_output_remover
    from layoutlab.guard import GuardedCallFailed, start_guarded

    results: list[FileResult] = []
    in_flight: list = []  # (input, output, started, GuardedCall)

    def collect_oldest() -> None:
        in_path, out_path, started, call = in_flight.pop(0)
        try:
            kind, value = call.result()
        except (UserError, GuardedCallFailed) as error:  # (the file's fault, or a crash/stop of its child)
            result = FileResult(in_path, out_path, error=str(error), seconds=time.perf_counter() - started)
        except Exception as error:  # noqa: BLE001  (a bug on one file must not stop the others: said with its type)
            result = FileResult(in_path, out_path, error=f"{type(error).__name__}: {error}",
                                seconds=time.perf_counter() - started)
        else:
            seconds = time.perf_counter() - started
            result = (FileResult(in_path, out_path, skipped=value, seconds=seconds) if kind == "skipped"
                      else FileResult(in_path, out_path, summary=value, seconds=seconds))
        results.append(result)
        if report is not None:
            report(result)

    try:
        for in_path, out_path in zip(inputs, outputs):
            while len(in_flight) >= max(1, workers):
                collect_oldest()
            # Each file in a child of its own holding no credentials (a file's harm stays with it). Verified, the
            # child decodes the file's chunks itself: every core already works on a file, so a child more per
            # file (the single repack's decode check) only took turns with them and added its fork, page faults
            # and exit to each file (20 GPM DPR granules, 2 jobs: 1.45 -> 1.11 s of CPU, 0.74x -> 0.63x a loop
            # of h5repack + h5diff).
            call = start_guarded(_repack_one, str(in_path), str(out_path), page_size, budget,
                                 {**options, "check_here": True}, path=str(in_path),
                                 cleanup=partial_output_remover(out_path), without_credentials=True)
            in_flight.append((in_path, out_path, time.perf_counter(), call))
        while in_flight:
            collect_oldest()
    finally:
        for _, _, _, call in in_flight:  # (interrupted: the children still running are stopped)
            call.cancel()
    return results
