"""Run benchmark cases and turn them into result records.

A *case* is a plain dict::

    {"target": "s3://bucket/key", "pattern": "map-timestep", "reader": "zarr-obstore",
     "params": {...}, "reader_options": {...}, "dataset": "...", "variant": "...",
     "platform": "local-lambda", "repetition": 0, "latency_ms": 25, "bandwidth_mbps": 720}

- ``run_case(case)`` measures it in *this* process (the bench Lambda/Fargate entry
  point calls it: there the invocation itself is the fresh process). It never
  raises for a bad target: it returns an error record.
- ``run_case_isolated(case, cloud)`` runs ``run_case`` in a fresh process pinned to
  one core with the platform's memory limit (``layoutlab.bench.isolation``), as the
  local runner must, and adds what the parent saw (peak RSS, process time).
- ``run_cases`` runs a list sequentially with a progress bar.

Request accounting (``layoutlab.bench.accounting``): every reader counts its
requests and response bytes at the client, wherever it runs; ``run_case`` reads
those counters after each phase (open, select, load). When
``LAYOUTLAB_PROXY_CONTROL`` names the local S3 proxy, ``run_case`` also opens a
proxy client of its own with the case's latency/bandwidth and reads the proxy's
counters after each phase. The record's ``requests``/``bytes_transferred``/...
come from the client (``counts_source: "client"``), or from the proxy for a
reader the client cannot count (ros3); ``client_counts`` and ``proxy_counts``
keep both (``request_counting``: ``client+proxy``, ``client``, ``proxy`` or ``none``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from layoutlab import settings
from layoutlab import storage
from layoutlab.bench.accounting import CASE_ACCESS_KEY, ProxyCounter
from layoutlab.errors import UserError
from layoutlab.results.record import derive_rates, error_record, new_record

BENCH_CHILD_ENV = "LAYOUTLAB_BENCH_CHILD"
# What a case's child needs, imported by its parent once (Lambda's init phase) so each forked child
# starts with them: the readers' libraries. run_case imports them lazily; preload() makes it cheap.
CHILD_PRELOAD = ("numpy", "h5py", "s3fs", "zarr", "obstore", "layoutlab.bench.patterns", "layoutlab.bench.readers")
# Where the local cloud's own addresses live in a task's environment (local/dispatch.py): a case behind a
# proxy client runs without them (AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_S3 are replaced by the client's).
AROUND_THE_LINK = ("MOTO_PORT",)
CASE_KEYS = {"target", "pattern", "reader", "params", "reader_options", "dataset", "variant", "platform",
             "repetition", "latency_ms", "bandwidth_mbps", "seed", "check_values"}


def _identity(case: dict) -> dict:
    target = str(case.get("target", ""))
    platform = case.get("platform") or "local-lambda"
    return {
        "dataset": str(case.get("dataset") or Path(target.rstrip("/")).name or target),
        "variant": str(case.get("variant") or "original"),
        "target": target,
        "pattern": str(case.get("pattern", "")),
        "reader": str(case.get("reader", "")),
        "platform": str(platform),
        "repetition": int(case.get("repetition", 0) or 0),
    }


def _platform_profile(name: str) -> dict | None:
    from layoutlab.platforms import platform_profile

    try:
        return platform_profile(name).to_dict()
    except UserError:
        return None


class _Counts:
    """The reader's client counters and, when present, the local proxy's: one snapshot per phase boundary."""

    PHASES = ("open", "select", "load")

    def __init__(self, reader, proxy):
        self.counter = reader.requests if reader.counts_requests else None
        self.proxy = proxy
        self.client_snaps: list = []
        self.proxy_snaps: list = []

    def snapshot(self) -> None:
        self.client_snaps.append(self.counter.snapshot() if self.counter is not None else None)
        self.proxy_snaps.append(self.proxy.snapshot() if self.proxy is not None else None)

    @staticmethod
    def _phases(snaps, seconds) -> dict:
        if snaps[0] is None:
            return {name: {"s": s, "requests": None, "bytes": None} for name, s in zip(_Counts.PHASES, seconds)}
        return {name: {"s": s, "requests": after["requests"] - before["requests"],
                       "bytes": after["bytes_transferred"] - before["bytes_transferred"]}
                for name, s, before, after in zip(_Counts.PHASES, seconds, snaps, snaps[1:])}

    def fields(self, seconds: tuple) -> dict:
        """The record's request fields for phases lasting ``seconds`` (open, select, load)."""
        from layoutlab.bench.accounting import difference

        client, proxy = self.client_snaps, self.proxy_snaps
        out = {"client_counts": None, "proxy_counts": None, "counts_source": None, "list_requests": None}
        if client[0] is not None:
            total = difference(client[-1], client[0])
            out["client_counts"] = {**total, "method": self.counter.method, "limits": list(self.counter.limits),
                                    "phases": self._phases(client, seconds)}
        if proxy[0] is not None:
            total = difference(proxy[-1], proxy[0])
            out["proxy_counts"] = {**total, "phases": self._phases(proxy, seconds)}
            seen = {kind: total["faults"].get(kind, 0) for kind in ("slowdown", "reset", "slow")}
            # every request answered 503 or reset was sent again by the reader
            out.update(faults_seen=seen, retries=seen["slowdown"] + seen["reset"])
        main = out["client_counts"] or out["proxy_counts"]
        if main is None:
            out.update(request_counting="none", phases=self._phases(client, seconds))
            return out
        out.update(counts_source="client" if out["client_counts"] else "proxy",
                   request_counting={(True, True): "client+proxy", (True, False): "client",
                                     (False, True): "proxy"}[(bool(out["client_counts"]), bool(out["proxy_counts"]))],
                   requests=main["requests"], get_requests=main["get_requests"], head_requests=main["head_requests"],
                   list_requests=main.get("list_requests"), bytes_transferred=main["bytes_transferred"],
                   phases=main["phases"])
        if out["proxy_counts"] is None:  # real S3: the attempts answered 5xx or not at all were sent again
            out["retries"] = main["errors"] if self.counter.sees_retries else None
        return out


def _peak_rss_mb() -> float:
    from layoutlab.bench.isolation import peak_rss_mb

    return peak_rss_mb()


def run_case(case: dict) -> dict:
    """Measure one case in this process and return its result record (status ok or error)."""
    identity = _identity(case)
    base = {**identity, "platform_profile": _platform_profile(identity["platform"]),
            "latency_ms": None, "bandwidth_mbps": None}
    unknown = set(case) - CASE_KEYS
    if unknown:
        return error_record(f"case: unknown key(s) {sorted(unknown)}", **base)
    proxy = None
    previous_environment = {name: os.environ.get(name)
                            for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                         *AROUND_THE_LINK)}
    try:
        from layoutlab.bench.patterns import check_values, get_pattern
        from layoutlab.bench.readers import make_reader

        target = identity["target"]
        if not storage.is_s3_url(target):
            if not target or not Path(target).exists():
                raise UserError(f"{target or '<empty>'}: no such file or directory")
            raise UserError(f"{target}: a case target must be an s3:// URL (upload local files first)")
        pattern = get_pattern(identity["pattern"])
        params = pattern.params(case.get("params"))
        reader = make_reader(identity["reader"], case.get("reader_options"))
        base.update(pattern_params=params, reader_settings=reader.settings)

        proxy = ProxyCounter(case.get("latency_ms"), case.get("bandwidth_mbps"))
        if proxy.client:
            # the case knows one S3 endpoint, its own proxy client's: no library finds the local S3's own
            # address in the environment (and the local S3 refuses reads around the client: case_guard)
            for name in AROUND_THE_LINK:
                os.environ.pop(name, None)
            os.environ["AWS_ENDPOINT_URL_S3"] = os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint
            os.environ["AWS_ACCESS_KEY_ID"] = CASE_ACCESS_KEY  # the case's identity, for the local S3's guard
            base.update(latency_ms=proxy.client["latency_ms"], bandwidth_mbps=proxy.client["bandwidth_mbps"])
        counts = _Counts(reader, proxy if proxy.client else None)

        reader.prepare()
        import numpy  # noqa: F401  (patterns need it; import cost is not the pattern's)

        counts.snapshot()
        cpu0, t0 = time.process_time(), time.perf_counter()
        handle = reader.open_for(target, pattern.group(params))
        t1 = time.perf_counter()
        counts.snapshot()
        try:
            t1b = time.perf_counter()
            selection = pattern.select(handle, params)
            t2 = time.perf_counter()
            counts.snapshot()
            t2b = time.perf_counter()
            loaded = pattern.load(handle, selection)
            t3 = time.perf_counter()
            cpu = time.process_time() - cpu0
            counts.snapshot()
            settings = {**reader.settings, **handle.settings_after_timing()}
            checksum = check_values(handle, selection, loaded, case.get("seed")) if case.get(
                "check_values", True) else None
        finally:
            handle.close()
        open_s, select_s, load_s = t1 - t0, t2 - t1b, t3 - t2b
        record = new_record(**base)
        fields = counts.fields((open_s, select_s, load_s))
        direct = (fields["proxy_counts"] or {}).get("direct_requests")
        if direct:
            raise UserError(f"{direct} read(s) reached the local S3 around the case's proxy client (refused): "
                            f"{identity['reader']} on {identity['variant']} is not comparable until every read "
                            "crosses the emulated link")
        record.update(
            reader_settings=settings, open_s=open_s, select_s=select_s, load_s=load_s,
            wall_s=open_s + select_s + load_s, cpu_s=cpu, peak_rss_mb=_peak_rss_mb(),
            bytes_needed=loaded.bytes_needed, points=loaded.points, checksum_ok=checksum,
            selection=selection.info, result_summary=loaded.summary,
            **fields,
        )
        return derive_rates(record)
    except UserError as error:
        message = str(error)
        return error_record(message if identity["target"] in message else f"{identity['target']}: {message}", **base)
    except FileNotFoundError as error:
        return error_record(f"{identity['target']}: not found ({error})", **base)
    except MemoryError:
        # Not the target's fault: the task is over its memory limit. Let it end the task, as
        # Lambda's out-of-memory kill does, so the state machine retries it and then records it.
        raise
    except Exception as error:  # a bad target must give a record, not a traceback; keep the type for debugging
        return error_record(f"{identity['target']}: {type(error).__name__}: {error}", **base)
    finally:
        if proxy is not None:
            try:
                proxy.close()
            except OSError:
                pass
        for name, value in previous_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_case_isolated(case: dict, cloud=None, timeout: float | None = 900, memory_error_ends_task: bool = False) -> dict:
    """``run_case`` in a fresh process pinned to one core with the platform's memory limit.

    ``memory_error_ends_task``: a child over the memory limit raises ``MemoryError`` here instead
    of giving an error record, so the task fails as Lambda's out-of-memory kill ends it (the state
    machine retries, then records it); the bench handler asks for this, the CLI does not."""
    from layoutlab.bench.isolation import run_forked, run_isolated
    from layoutlab.platforms import platform_profile

    identity = _identity(case)
    try:
        profile = platform_profile(identity["platform"])
    except UserError as error:
        return error_record(str(error), **identity)
    # cloud: the local cloud handle of the CLI (its env() and the core its servers leave free);
    # on Lambda and Fargate there is none and the child keeps the task's CPUs.
    env = cloud.env() if cloud is not None else {}
    cpu = getattr(cloud, "measured_cpu", None)
    # A fork of this process (imports done, no data read) when that is safe: only a process with no other
    # thread may fork (a thread holding a lock, e.g. zarr's event-loop thread once zarr has run, leaves the
    # child waiting forever). Otherwise, or when LAYOUTLAB_BENCH_CHILD=interpreter asks, a new interpreter.
    import threading

    fresh = settings.value(BENCH_CHILD_ENV) == "interpreter" or threading.active_count() > 1
    if fresh:
        outcome = run_isolated("layoutlab.bench.runner:run_case", case, memory_mb=profile.memory_mb, env=env,
                               cpu=cpu, timeout=timeout)
    else:  # the reader's own libraries come from a zygote that imported them once (isolation.run_forked)
        outcome = run_forked("layoutlab.bench.runner:run_case", case, memory_mb=profile.memory_mb, env=env,
                             cpu=cpu, timeout=timeout, libraries=_reader_modules(case))
    isolation = {"fresh_process": True, "child": "interpreter" if fresh else "fork", "cpu": outcome.cpu,
                 "memory_limit_mb": profile.memory_mb,
                 "memory_limit": outcome.memory_limit, "process_wall_s": outcome.process_wall_s,
                 # what the child's peak RSS includes besides the case: a forked child carries its parent's modules
                 "peak_rss_source": outcome.peak_rss_source,
                 "process_cpu_s": outcome.user_cpu_s + outcome.system_cpu_s,
                 # whether the kernel confined the case's process to its own folder (layoutlab/sandbox.py)
                 "sandbox": outcome.sandbox}
    if memory_error_ends_task and not outcome.ok and outcome.error_type == "MemoryError":
        raise MemoryError(outcome.error)
    if outcome.ok:
        record = outcome.result
        record["peak_rss_mb"] = outcome.peak_rss_mb  # the child's peak up to its exit (after the checksum too)
    else:
        record = error_record(outcome.error, **identity, platform_profile=profile.to_dict())
        record["peak_rss_mb"] = outcome.peak_rss_mb
    record["isolation"] = isolation
    return derive_rates(record)


def _reader_modules(case: dict) -> tuple[str, ...]:
    """What the case's reader imports before its timed region (``Reader.modules``); () for an unknown reader
    (the case itself says why it cannot run)."""
    from layoutlab.bench.readers import READERS

    reader = READERS.get(case.get("reader", ""))
    return tuple(reader.modules) if reader is not None else ()


def preload() -> None:
    """Import what every case's child needs (``CHILD_PRELOAD``), so forked children do not each import it."""
    import importlib

    for name in CHILD_PRELOAD:
        importlib.import_module(name)


def run_cases(cases: list[dict], cloud=None, isolated: bool = True, progress: bool = True, on_record=None) -> list:
    """Run ``cases`` one after the other (never in parallel: they would share the core)."""
    from tqdm import tqdm

    records = []
    if isolated:
        preload()
    bar = tqdm(cases, desc="bench", unit="case", disable=not progress)
    for case in bar:
        bar.set_postfix_str(f"{case.get('pattern')} {case.get('reader')}")
        record = run_case_isolated(case, cloud) if isolated else run_case(case)
        records.append(record)
        if on_record:
            on_record(record)
    return records


# -- targets -------------------------------------------------------------------
BENCH_BUCKET = "layoutlab-bench"


def upload_target(path: str | os.PathLike, cloud, bucket: str = BENCH_BUCKET, prefix: str = "targets") -> str:
    """Upload a local file or directory (Zarr store) to the local cloud; return its s3:// URL.

    Uploads go straight to moto (no emulated latency, not counted); keys are
    under ``targets/``, never ``incoming/``.
    """
    import boto3

    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    s3 = boto3.client("s3", endpoint_url=cloud.moto_endpoint, region_name=storage.aws_region())
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    base = f"{prefix}/{path.name}"
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            s3.upload_file(str(file), bucket, f"{base}/{file.relative_to(path).as_posix()}")
    else:
        s3.upload_file(str(path), bucket, base)
    return f"s3://{bucket}/{base}"
