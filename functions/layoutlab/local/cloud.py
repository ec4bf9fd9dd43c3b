"""The local cloud: moto (S3, DynamoDB, CloudWatch, Step Functions) + the S3 proxy.

One background process (``python -m layoutlab.local.cloud``) runs moto in server
mode on 127.0.0.1 (with the ranged-GET patch) and the latency/bandwidth/counting
proxy in front of its S3, both on free ports, pinned to the "server" cores so
the measured process can have a core of its own. It writes a JSON state file
(pid, ports, endpoints) once both are listening and removes it when it stops
(SIGTERM/SIGINT).

``start_local_cloud()`` starts one and returns a ``LocalCloud`` handle;
``LocalCloud.from_state()`` attaches to a running one (``layoutlab local up``);
``.stop()`` stops what was started. ``.env()`` gives the environment a client
needs: ``AWS_ENDPOINT_URL`` = moto (DynamoDB, Step Functions, CloudWatch, and
uploads without emulated latency), ``AWS_ENDPOINT_URL_S3`` = the proxy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from layoutlab import settings
from layoutlab.bench.accounting import http_json
from layoutlab.local.proxy import DEFAULT_BANDWIDTH_MBPS, DEFAULT_LATENCY_MS

HOST = "127.0.0.1"
STATE_FILE = "local-cloud.json"
LOCAL_REGION = "us-east-1"
# moto accepts any credentials: the local cloud needs none of the user's, and must never be sent real ones.
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "layoutlab-local", "AWS_SECRET_ACCESS_KEY": "layoutlab-local"}
# glibc malloc of the local cloud process. moto (a thread per request) and the proxy pass whole objects and
# answers of MBs around; with glibc's defaults (up to 8 arenas per core, an mmap threshold that rises to the
# largest block freed, up to 32 MiB) such blocks come from the arenas' heaps and freed space is rarely given
# back: the process grew per benchmark case (a default-plan study of a 3.4 MB product: 1.6 GB after ~300 cases,
# 2.3 GB after ~425) while the Python objects it kept grew by kilobytes (tracemalloc, LAYOUTLAB_CLOUD_TRACEMALLOC).
# Two arenas and a fixed threshold give large blocks back when freed (docs/local-run.md has the figures). Only
# the cloud's own process: tasks get an environment made from scratch (artifact_runtime). A value set wins.
CLOUD_MALLOC_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def use_local_credentials() -> None:
    """This process talks to the local cloud only: give its AWS clients the local stand-in credentials and
    a region, whatever the user has (or has not) configured — no credentials, no region, no ~/.aws is fine."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        os.environ.pop(name, None)
    os.environ.update(LOCAL_CREDENTIALS)
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
        os.environ["AWS_DEFAULT_REGION"] = LOCAL_REGION


def state_dir() -> Path:
    """Per-user directory for the state of ``layoutlab local up``."""
    if settings.value("LAYOUTLAB_STATE_DIR"):
        return Path(settings.value("LAYOUTLAB_STATE_DIR"))
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "layoutlab"


def default_state_path() -> Path:
    return state_dir() / STATE_FILE


def core_split() -> tuple[set[int], int]:
    """(cores for the local servers, the core for the measured process).

    The measured process gets the last allowed core; the servers the others
    (on one core they must share it).
    """
    allowed = sorted(os.sched_getaffinity(0))
    measured = allowed[-1]
    servers = set(allowed[:-1]) or {measured}
    return servers, measured


def pid_running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class LocalCloud:
    pid: int
    moto_port: int
    proxy_port: int
    latency_ms: float
    bandwidth_mbps: float
    state_path: str
    server_cpus: list[int]

    # -- endpoints -------------------------------------------------------
    @property
    def moto_endpoint(self) -> str:
        return f"http://{HOST}:{self.moto_port}"

    @property
    def s3_endpoint(self) -> str:
        """The proxied S3 endpoint (default client: default latency/bandwidth)."""
        return f"http://{HOST}:{self.proxy_port}"

    @property
    def control_url(self) -> str:
        return f"http://{HOST}:{self.proxy_port}/_layoutlab"

    @property
    def measured_cpu(self) -> int:
        """The core a measured process runs on (the servers keep off it)."""
        return core_split()[1]

    def env(self) -> dict[str, str]:
        return {
            **LOCAL_CREDENTIALS,
            "AWS_DEFAULT_REGION": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or LOCAL_REGION,
            "AWS_ENDPOINT_URL": self.moto_endpoint,
            "AWS_ENDPOINT_URL_S3": self.s3_endpoint,
            "LAYOUTLAB_PROXY_CONTROL": self.control_url,
            "MOTO_PORT": str(self.moto_port),
        }

    # -- state -----------------------------------------------------------
    @classmethod
    def from_state(cls, path: str | os.PathLike | None = None) -> "LocalCloud | None":
        """The running local cloud recorded in ``path``, or None (stale files are removed)."""
        path = Path(path or default_state_path())
        try:
            state = json.loads(path.read_text())
            cloud = cls(**state)
        except (OSError, ValueError, TypeError):
            return None
        if not cloud.alive():
            path.unlink(missing_ok=True)
            return None
        return cloud

    def alive(self) -> bool:
        if not pid_running(self.pid):
            return False
        try:
            http_json("GET", self.control_url + "/status", timeout=5)
        except OSError:
            return False
        return True

    def status(self) -> dict:
        status = http_json("GET", self.control_url + "/status")
        return {**asdict(self), "moto_endpoint": self.moto_endpoint, "s3_endpoint": self.s3_endpoint,
                "proxy": status}

    # -- proxy clients ---------------------------------------------------
    def new_client(self, latency_ms: float | None = None, bandwidth_mbps: float | None = None,
                   name: str = "client") -> dict:
        """A proxy port of its own (own counters, own latency); returns its stats incl. ``endpoint``."""
        spec = {"name": name}
        if latency_ms is not None:
            spec["latency_ms"] = latency_ms
        if bandwidth_mbps is not None:
            spec["bandwidth_mbps"] = bandwidth_mbps
        client = http_json("POST", self.control_url + "/clients", spec)
        client["endpoint"] = f"http://{HOST}:{client['port']}"
        return client

    def client_stats(self, client_id: str = "default") -> dict:
        return http_json("GET", f"{self.control_url}/clients/{client_id}")

    def set_faults(self, **settings) -> dict:
        """Faults of the default client and of every client opened from now on (see ``proxy.Faults``);
        no arguments turns them off."""
        return http_json("POST", f"{self.control_url}/faults", settings)

    def close_client(self, client_id: str) -> dict:
        return http_json("DELETE", f"{self.control_url}/clients/{client_id}")

    def reset(self) -> None:
        """Empty every moto backend and zero the default client's counters."""
        http_json("POST", self.moto_endpoint + "/moto-api/reset")
        http_json("POST", self.control_url + "/clients/default?action=reset")

    # -- lifecycle -------------------------------------------------------
    def stop(self, timeout: float = 15) -> None:
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        process = getattr(self, "_process", None)
        if process is not None:  # our own child: reap it (a zombie still answers kill(pid, 0))
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            Path(self.state_path).unlink(missing_ok=True)
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not pid_running(self.pid):
                break
            time.sleep(0.05)
        else:
            os.kill(self.pid, signal.SIGKILL)
        Path(self.state_path).unlink(missing_ok=True)


def start_local_cloud(state_path: str | os.PathLike | None = None, latency_ms: float = DEFAULT_LATENCY_MS,
                      bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS, detach: bool = False,
                      log_path: str | os.PathLike | None = None, timeout: float = 60,
                      stock_moto: bool = False, objects_on_disk_over: int | None = None) -> LocalCloud:
    """Start the local cloud in a background process and wait until it listens.

    ``objects_on_disk_over``: S3 objects larger than this many bytes are kept in temporary files
    on disk instead of memory, and multipart uploads over it are joined on disk (moto_patch): for
    objects larger than the machine's memory (a 7 GB granule and its copies). Default: in memory.

    ``state_path`` defaults to a fresh temporary file (so tests and ephemeral
    runs never collide with ``layoutlab local up``). ``detach`` starts it in its
    own session so it outlives the caller (``local up``); otherwise it stops by itself when the
    caller's process ends, however that ends (a benchmark killed by SIGTERM or SIGKILL runs no
    ``finally`` that would stop it, and a forgotten cloud keeps its objects and ports).
    """
    if state_path is None:
        handle, state_path = tempfile.mkstemp(prefix="layoutlab-cloud-", suffix=".json")
        os.close(handle)
        os.unlink(state_path)
    state_path = Path(state_path)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state_path.unlink(missing_ok=True)
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    cmd = [sys.executable, "-m", "layoutlab.local.cloud", "--state", str(state_path),
           "--latency-ms", str(latency_ms), "--bandwidth-mbps", str(bandwidth_mbps)]
    if stock_moto:
        cmd.append("--stock-moto")
    if objects_on_disk_over is not None:
        cmd += ["--objects-on-disk-over", str(int(objects_on_disk_over))]
    if not detach:
        cmd += ["--stop-with", str(os.getpid())]
    process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               env={**CLOUD_MALLOC_ENV, **os.environ}, start_new_session=detach, close_fds=True)
    if log is not subprocess.DEVNULL:
        log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"local cloud exited with status {process.returncode}"
                               + (f"; see {log_path}" if log_path else ""))
        if state_path.exists():
            cloud = LocalCloud.from_state(state_path)
            if cloud:
                cloud._process = process  # keep the Popen so it is reaped on stop
                return cloud
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"local cloud did not start within {timeout:.0f} s")


# -- the service process ---------------------------------------------------
def trace_allocations(snapshot_dir: str) -> None:
    """Debug only (``LAYOUTLAB_CLOUD_TRACEMALLOC=DIR``): trace this process's allocations and write a
    tracemalloc snapshot to DIR/cloud-<n>.tracemalloc on each SIGUSR1, to find what the local cloud keeps
    (compare two with ``Snapshot.compare_to``). Unset, nothing is traced: tracing costs memory and CPU."""
    if not snapshot_dir:
        return
    import itertools
    import tracemalloc

    tracemalloc.start(10)  # frames enough to name the owner, few enough to keep moto answering
    Path(snapshot_dir).mkdir(parents=True, exist_ok=True)
    numbers = itertools.count(1)

    def write_snapshot(*_):
        path = Path(snapshot_dir) / f"cloud-{next(numbers)}.tracemalloc"
        tracemalloc.take_snapshot().dump(path)
        logging.getLogger(__name__).info("tracemalloc snapshot written to %s", path)

    signal.signal(signal.SIGUSR1, write_snapshot)


# Every 10 s the cloud gives glibc's free pages back to the system (malloc_trim). With the arenas above, a burst
# of 300 granules still took its RSS to 7.1 GB while the Python objects it kept stayed under 150 MiB
# (tracemalloc, 60 granules: 148 -> 137 MiB traced as RSS rose 415 -> 594 MiB): freed blocks between live
# ones in the heap, which glibc returns only from the heap's top, unless asked to trim.
TRIM_EVERY_TICKS = 20  # (ticks of 0.5 s)


def _malloc_trim():
    """glibc's ``malloc_trim`` (returns every whole free page of every arena), or None elsewhere."""
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def serve(state_path: Path, latency_ms: float, bandwidth_mbps: float, stock_moto: bool = False,
          objects_on_disk_over: int | None = None, stop_with: int | None = None) -> None:
    # This process holds the credentials of whoever ran `layoutlab local up`: non-dumpable, its
    # /proc/<pid>/environ and memory are closed to the tasks it runs (same user, no CAP_SYS_PTRACE)
    from layoutlab.sandbox import make_non_dumpable

    make_non_dumpable()
    trace_allocations(settings.value("LAYOUTLAB_CLOUD_TRACEMALLOC"))
    servers, measured = core_split()
    os.sched_setaffinity(0, servers)

    from moto.core.config import default_user_config

    from layoutlab.local import moto_patch
    from layoutlab.local.case_guard import CaseGuard, guarded_moto_server
    from layoutlab.local.proxy import ProxyThread, S3Proxy

    if not stock_moto:  # stock_moto: only for benchmarks/bench_ranged_get.py's side-by-side comparison
        moto_patch.apply(key_buffer_bytes=objects_on_disk_over)
    # moto executes state machines only when asked (DESIGN.md section 4)
    default_user_config["stepfunctions"]["execute_state_machine"] = True
    # while a benchmark case runs, moto serves S3 reads only through the proxy (local/case_guard.py)
    guard = CaseGuard()
    moto = guarded_moto_server(guard, HOST)
    moto.start()
    moto_port = moto.get_host_and_port()[1]
    os.environ["MOTO_PORT"] = str(moto_port)  # moto's SFN/Lambda call back to themselves on it
    proxy = ProxyThread(S3Proxy(f"http://{HOST}:{moto_port}", host=HOST, latency_ms=latency_ms,
                                bandwidth_mbps=bandwidth_mbps, guard=guard))
    proxy_port = proxy.start()
    # The state machine's Lambda and ECS tasks run from the deployment artifacts on the measured core.
    from layoutlab.local import dispatch

    dispatcher = dispatch.install(f"http://{HOST}:{moto_port}", f"http://{HOST}:{proxy_port}/_layoutlab", measured)
    # S3's EventBridge events reach the rules' Lambda targets (the ingest function) as in AWS.
    from layoutlab.local import s3_events, sfn_adapter

    def invoke(function_arn, event):
        return dispatcher.invoke_lambda(sfn_adapter.function_name_of(function_arn), event)

    event_targets = s3_events.install(invoke)
    # ... and the ingest queue's messages reach ingest in batches, as its event source mapping does in AWS
    import boto3

    from layoutlab.local.sqs_source import QueueEventSource
    from layoutlab.pipeline.events import INGEST_BATCH_SIZE

    queue_source = QueueEventSource(
        boto3.client("sqs", endpoint_url=f"http://{HOST}:{moto_port}", region_name=dispatch.REGION,
                     aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]),
        dispatch.INGEST_QUEUE, dispatch.function_arn("ingest"), invoke, batch_size=INGEST_BATCH_SIZE,
        workers=dispatch.INGEST_POLLERS)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    state = LocalCloud(pid=os.getpid(), moto_port=moto_port, proxy_port=proxy_port, latency_ms=latency_ms,
                       bandwidth_mbps=bandwidth_mbps, state_path=str(state_path), server_cpus=sorted(servers))
    partial = state_path.with_name(state_path.name + ".partial")
    partial.write_text(json.dumps(asdict(state)))
    os.replace(partial, state_path)
    trim = _malloc_trim()
    try:
        for tick in itertools.count(1):
            if stop.wait(0.5):
                break
            if trim is not None and tick % TRIM_EVERY_TICKS == 0:
                trim(0)
            if stop_with is not None and not pid_running(stop_with):
                logging.getLogger(__name__).info("process %d that started the local cloud has ended: stopping", stop_with)
                break
    finally:
        queue_source.stop()
        event_targets.stop()
        dispatcher.stop()
        proxy.stop()
        moto.stop()
        state_path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the layoutlab local cloud (moto + S3 proxy) in the foreground.")
    parser.add_argument("--state", required=True, type=Path)
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_MS)
    parser.add_argument("--bandwidth-mbps", type=float, default=DEFAULT_BANDWIDTH_MBPS)
    parser.add_argument("--stock-moto", action="store_true", help="without the ranged-GET patch (for comparison)")
    parser.add_argument("--stop-with", type=int, metavar="PID",
                        help="stop when process PID has ended (start_local_cloud passes its own unless detached)")
    parser.add_argument("--objects-on-disk-over", type=int, metavar="BYTES",
                        help="keep S3 objects over BYTES in temporary files on disk (default: all in memory)")
    args = parser.parse_args(argv)
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if args.stock_moto and args.objects_on_disk_over is not None:
        parser.error("--objects-on-disk-over needs the patched moto (drop --stock-moto)")
    serve(args.state, args.latency_ms, args.bandwidth_mbps, stock_moto=args.stock_moto,
          objects_on_disk_over=args.objects_on_disk_over, stop_with=args.stop_with)
    return 0


if __name__ == "__main__":
    sys.exit(main())
