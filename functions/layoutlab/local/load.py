"""Many uploads at once through the local pipeline, counted and timed (issue #8, load).

``run_load`` uploads ``n`` copies of one small file under distinct keys, delivers
their events all at once (one ingest process per event, as concurrent Lambda
invocations would be), waits for every execution and then counts what the
results table holds: every dataset must have exactly the cases its plan made,
no more (duplicates) and no fewer (lost). While it runs, ``TreeMemory`` samples
the memory of the local cloud's server process and of every process under it
(moto, the proxy, the fork server and the task processes), and of the driver's
tree (the process delivering events and its ingest processes).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

# The smallest complete pipeline: the original only, one case, one repetition. Load and
# reliability runs count pipelines and items, not read speed, so each should cost little.
ONE_CASE_PLAN = {
    "name": "one-case",
    "variants": [{"kind": "original"}],
    "patterns": {"grid": ["timeseries-point"], "granule": []},
    "readers": {"hdf5": ["h5py-s3fs-aligned"], "zarr": []},
    "platforms": ["local-lambda"],
    "repetitions": 1,
    "max_concurrency": 1,
}


class TreeMemory(threading.Thread):
    """Peak memory of process trees, sampled every ``interval`` seconds until ``stop()``.

    For each root: the root's own resident set (RSS), and the tree's total as the
    sum of PSS (proportional set size: pages shared between forked processes are
    split between them, so the total is not inflated by counting them twice) and
    as the sum of RSS (an upper bound).
    """

    def __init__(self, roots: dict[str, int], interval: float = 0.2):
        super().__init__(daemon=True)
        self.roots = roots
        self.interval = interval
        self.peak: dict[str, dict[str, float]] = {
            name: {"root_rss_mb": 0.0, "tree_pss_mb": 0.0, "tree_rss_mb": 0.0, "tree_processes": 0} for name in roots}
        self.samples = 0
        self._stop_event = threading.Event()

    def sample(self) -> None:
        for name, pid in self.roots.items():
            try:
                root = psutil.Process(pid)
                processes = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            pss = rss = 0
            root_rss = 0
            for process in processes:
                try:
                    info = process.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                pss += info.pss
                rss += info.rss
                if process.pid == pid:
                    root_rss = info.rss
            peak = self.peak[name]
            peak["root_rss_mb"] = max(peak["root_rss_mb"], root_rss / 2**20)
            peak["tree_pss_mb"] = max(peak["tree_pss_mb"], pss / 2**20)
            peak["tree_rss_mb"] = max(peak["tree_rss_mb"], rss / 2**20)
            peak["tree_processes"] = max(peak["tree_processes"], len(processes))
        self.samples += 1

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.sample()
            self._stop_event.wait(self.interval)

    def stop(self) -> dict:
        self._stop_event.set()
        self.join()
        self.sample()
        return self.peak


def metric_samples(moto_endpoint: str, spec) -> int:
    """Data points of ``spec`` (an ``observability.MetricSpec``) in the local CloudWatch, over
    every dimension value: each bench run sends one wall-time point, each ingest one count."""
    from datetime import datetime, timedelta, timezone

    import boto3

    from layoutlab import observability as obs
    from layoutlab.local import dispatch

    cloudwatch = boto3.client("cloudwatch", endpoint_url=moto_endpoint, region_name=dispatch.REGION)
    now = datetime.now(timezone.utc)
    # moto lists a metric once per data point put: query each dimension set once
    dimension_sets = {tuple(sorted((d["Name"], d["Value"]) for d in metric["Dimensions"]))
                      for page in cloudwatch.get_paginator("list_metrics").paginate(Namespace=obs.NAMESPACE,
                                                                                      MetricName=spec.name)
                      for metric in page["Metrics"]}
    total = 0
    for dimensions in dimension_sets:
        points = cloudwatch.get_metric_statistics(
            Namespace=obs.NAMESPACE, MetricName=spec.name,
            Dimensions=[{"Name": n, "Value": v} for n, v in dimensions],
            StartTime=now - timedelta(days=1), EndTime=now + timedelta(hours=1), Period=86400,
            Statistics=["SampleCount"])["Datapoints"]
        total += int(sum(p["SampleCount"] for p in points))
    return total


@dataclass
class LoadReport:
    uploads: int
    plan: str
    started: int
    statuses: dict[str, int]
    results_expected: int
    results_found: int
    datasets_with_missing_results: list[str]
    datasets_with_extra_results: list[str]
    summaries: int
    executions: int
    bench_runs: int  # bench invocations, from their metrics: more than results_expected = a case ran twice
    upload_s: float
    deliver_s: float
    total_s: float
    memory: dict = field(default_factory=dict)
    memory_samples: int = 0

    @property
    def complete(self) -> bool:
        """Every upload ran one pipeline that succeeded, with every result stored exactly once."""
        return (self.started == self.uploads == self.executions == self.statuses.get("SUCCEEDED", 0)
                == self.summaries and self.results_found == self.results_expected == self.bench_runs
                and not self.datasets_with_missing_results and not self.datasets_with_extra_results)

    def to_dict(self) -> dict:
        return {**asdict(self), "complete": self.complete}


def run_load(pipeline, sample: str | Path, n: int, plan: str, *, timeout: float = 1800,
             key_prefix: str = "incoming/load-", progress=None) -> LoadReport:
    """Upload ``sample`` ``n`` times under distinct keys, deliver every event at once, wait, count.

    ``pipeline`` is a set-up ``LocalPipeline`` whose ingest bucket holds the plan ``plan``.
    """
    from layoutlab.local import dispatch

    sample = Path(sample)
    memory = TreeMemory({"local_cloud": pipeline.cloud.pid, "driver": psutil.Process().pid})
    memory.start()
    try:
        began = time.perf_counter()
        keys = [f"{key_prefix}{i:04d}-{sample.name}" for i in range(n)]
        with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
            events = list(pool.map(lambda key: pipeline.upload(sample, key=key, plan=plan), keys))
        uploaded = time.perf_counter()

        # One dispatcher per event: each runs its ingest process at once with the others.
        def deliver(event):
            dispatcher = dispatch.Dispatcher(pipeline.cloud.moto_endpoint, pipeline.cloud.control_url, None)
            try:
                return dispatcher.invoke_lambda(dispatch.function_name("ingest"), event)["outcomes"]
            finally:
                dispatcher.stop()

        with ThreadPoolExecutor(max_workers=n) as pool:
            outcomes = [o for batch in pool.map(deliver, events) for o in batch]
        delivered = time.perf_counter()
        final = pipeline.wait([o for o in outcomes if o["status"] == "started"], timeout=timeout,
                              on_progress=progress)
        finished = time.perf_counter()
    finally:
        peaks = memory.stop()

    started = [o for o in outcomes if o["status"] == "started"]
    expected = found = 0
    missing, extra = [], []
    summaries = 0
    for outcome in started:
        items = pipeline.store.items(dataset=outcome["dataset_id"])
        kinds = Counter(i["kind"] for i in items)
        [run] = [i for i in items if i["kind"] == "RUN"]
        planned = int(run.get("cases") or 0)
        expected += planned
        found += kinds["RESULT"]
        if kinds["RESULT"] < planned:
            missing.append(outcome["dataset_id"])
        elif kinds["RESULT"] > planned:
            extra.append(outcome["dataset_id"])
        summaries += kinds["SUMMARY"]
    from layoutlab import observability as obs

    pages = pipeline.sfn.get_paginator("list_executions").paginate(stateMachineArn=dispatch.state_machine_arn())
    executions = sum(len(page["executions"]) for page in pages)
    return LoadReport(
        uploads=n, plan=plan, started=len(started), statuses=dict(Counter(final.values())),
        results_expected=expected, results_found=found, datasets_with_missing_results=missing,
        datasets_with_extra_results=extra, summaries=summaries, executions=executions,
        bench_runs=metric_samples(pipeline.cloud.moto_endpoint, obs.BENCH_WALL_TIME),
        upload_s=round(uploaded - began, 3), deliver_s=round(delivered - uploaded, 3),
        total_s=round(finished - began, 3), memory={k: {m: round(v, 1) for m, v in p.items()} for k, p in peaks.items()},
        memory_samples=memory.samples,
    )
