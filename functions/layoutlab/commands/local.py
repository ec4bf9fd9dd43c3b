"""``layoutlab local up|down|status|env``: the local cloud as a background service."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from layoutlab.errors import UserError

EPILOG = """\
examples:
  layoutlab local up                          # the local cloud and the pipeline, in the background
  eval "$(layoutlab local env)"               # point the AWS CLI, boto3, s3fs, obstore at it
  aws s3 cp my.h5 s3://layoutlab-local-ingest/incoming/   # starts the pipeline by itself
  layoutlab local status                      # running and finished executions
  layoutlab results                           # when they are done
  layoutlab local down                        # keeps the results (layoutlab results), stops everything
  layoutlab local up --latency-ms 30 --bandwidth-mbps 0   # 0 = no bandwidth cap

An upload naming no plan (user metadata layoutlab-plan) runs s3://layoutlab-local-ingest/plans/local.json,
the demo's plan unless you put your own there.

The state file (pid, ports) lives in $LAYOUTLAB_STATE_DIR, else
$XDG_STATE_HOME/layoutlab, else ~/.local/state/layoutlab.
"""


def register(subparsers) -> None:
    from layoutlab.local.proxy import DEFAULT_BANDWIDTH_MBPS, DEFAULT_LATENCY_MS

    parser = subparsers.add_parser(
        "local", help="start/stop the local cloud (moto + S3 latency proxy) on 127.0.0.1",
        description="Run the embedded local cloud: moto in server mode (S3, DynamoDB, CloudWatch, Step Functions) "
                    "and an S3 proxy in front of it that adds first-byte latency and a bandwidth cap and counts "
                    "requests and bytes. Loopback only, free ports.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down", "status", "env"],
                        help="up: start in the background; down: keep the results and stop it; status: show the "
                             "executions, ports and counters; env: print shell exports for clients")
    parser.add_argument("--latency-ms", type=float, default=DEFAULT_LATENCY_MS,
                        help=f"first-byte latency added to each S3 request (default {DEFAULT_LATENCY_MS:g}; e.g. 0)")
    parser.add_argument("--bandwidth-mbps", type=float, default=DEFAULT_BANDWIDTH_MBPS,
                        help=f"per-request bandwidth cap in Mbit/s, 0 = none (default {DEFAULT_BANDWIDTH_MBPS:g})")
    parser.add_argument("--state", type=Path, default=None,
                        help="state file to use instead of the per-user one (e.g. /tmp/cloud.json)")
    parser.add_argument("--json", action="store_true", help="status as JSON")
    parser.set_defaults(func=run)


def run(args) -> int:
    from layoutlab.local.cloud import LocalCloud, default_state_path, start_local_cloud
    from layoutlab.local.pipeline import LocalPipeline

    state = args.state or default_state_path()
    cloud = LocalCloud.from_state(state)
    if args.action == "up":
        if cloud:
            print(f"local cloud already running (pid {cloud.pid}): S3 {cloud.s3_endpoint}, moto {cloud.moto_endpoint}")
            return 0
        if args.latency_ms < 0 or args.bandwidth_mbps < 0:
            raise UserError("--latency-ms and --bandwidth-mbps must be >= 0")
        from layoutlab.local.artifact_runtime import Artifacts, ArtifactsMissing

        try:  # ingest and every task run from them: missing or stale ones are said now, not in the cloud's log
            Artifacts.locate()
        except ArtifactsMissing as error:
            raise UserError(str(error)) from None
        log = Path(state).with_suffix(".log")
        cloud = start_local_cloud(state, latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps,
                                  detach=True, log_path=log)
        try:
            pipeline = LocalPipeline(cloud)
            pipeline.setup(s3_events=True)
            kept = pipeline.load_snapshot()
        except BaseException:
            cloud.stop()
            raise
        from layoutlab.local import dispatch

        print(f"local cloud up (pid {cloud.pid}): S3 via proxy {cloud.s3_endpoint} "
              f"({cloud.latency_ms:g} ms, {cloud.bandwidth_mbps:g} Mbit/s), moto {cloud.moto_endpoint}; log {log}")
        print(f"pipeline deployed: an object created under s3://{dispatch.INGEST_BUCKET}/incoming/ starts it; "
              f"{kept} kept result items loaded")
        return 0
    if cloud is None:
        if args.action == "down":
            print("local cloud is not running")
            return 0
        raise UserError(f"{state}: no local cloud running (start one with 'layoutlab local up')")
    if args.action == "down":
        kept = keep_results(cloud)
        cloud.stop()
        print(f"local cloud stopped (pid {cloud.pid})" + (f"; results kept in {kept}" if kept else ""))
    elif args.action == "env":
        for key, value in cloud.env().items():
            print(f"export {key}={value}")
    else:
        status = cloud.status()
        executions = pipeline_executions(cloud)
        if args.json:
            print(json.dumps({**status, "executions": executions}, indent=2, default=str))
        else:
            print(f"local cloud running (pid {cloud.pid}) state {state}")
            print(f"  moto   {cloud.moto_endpoint}  (S3, DynamoDB, CloudWatch, Step Functions)")
            print(f"  S3     {cloud.s3_endpoint}  latency {cloud.latency_ms:g} ms, bandwidth {cloud.bandwidth_mbps:g} Mbit/s")
            for cid, client in status["proxy"]["clients"].items():
                print(f"  client {cid}: port {client['port']}, {client['requests']} requests, "
                      f"{client['bytes_out']} bytes out")
            print(execution_lines(executions))
    return 0


def keep_results(cloud) -> Path | None:
    """Write the local results table to the snapshot ``layoutlab results`` reads once the cloud is down."""
    from layoutlab.local.pipeline import LocalPipeline

    try:
        return LocalPipeline(cloud).save_snapshot()
    except Exception as error:  # a cloud started by an older 'local up' without the pipeline: nothing to keep
        print(f"results not kept: {error}")
        return None


def pipeline_executions(cloud) -> list[dict]:
    """The pipeline's executions, newest first, each with its cases done and planned."""
    from layoutlab.local.pipeline import LocalPipeline

    pipeline = LocalPipeline(cloud)
    try:
        found = pipeline.executions()
    except pipeline.sfn.exceptions.StateMachineDoesNotExist:
        return []
    rows = []
    for execution in found:
        done, planned = pipeline.progress([execution["name"]])
        rows.append({"name": execution["name"], "status": execution["status"], "started": execution["startDate"],
                     "stopped": execution.get("stopDate"), "cases_done": done, "cases_planned": planned})
    return rows


def execution_lines(executions: list[dict]) -> str:
    if not executions:
        return "  executions: none yet (copy a file under s3://layoutlab-local-ingest/incoming/)"
    running = sum(e["status"] == "RUNNING" for e in executions)
    lines = [f"  executions: {running} running, {len(executions) - running} finished"]
    for e in executions:
        took = ((e["stopped"] or e["started"]).timestamp() - e["started"].timestamp()) if e["stopped"] else None
        lines.append(f"    {e['status']:<9} {e['name']}  {e['cases_done']}/{e['cases_planned']} cases, started "
                     f"{e['started']:%H:%M:%S}" + (f", took {took:.0f} s" if took is not None else ""))
    return "\n".join(lines)
