"""``layoutlab local up|down|status|env``: the local cloud as a background service."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from layoutlab.errors import UserError

EPILOG = """\
examples:
  layoutlab local up                          # moto + S3 proxy (25 ms, 720 Mbit/s) in the background
  layoutlab local up --latency-ms 30 --bandwidth-mbps 0   # 0 = no bandwidth cap
  eval "$(layoutlab local env)"               # point boto3/s3fs/obstore at it
  layoutlab local status
  layoutlab local down                        # stops everything 'up' started

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
                        help="up: start in the background; down: stop it; status: show ports and counters; "
                             "env: print shell exports for clients")
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

    state = args.state or default_state_path()
    cloud = LocalCloud.from_state(state)
    if args.action == "up":
        if cloud:
            print(f"local cloud already running (pid {cloud.pid}): S3 {cloud.s3_endpoint}, moto {cloud.moto_endpoint}")
            return 0
        if args.latency_ms < 0 or args.bandwidth_mbps < 0:
            raise UserError("--latency-ms and --bandwidth-mbps must be >= 0")
        log = Path(state).with_suffix(".log")
        cloud = start_local_cloud(state, latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps,
                                  detach=True, log_path=log)
        print(f"local cloud up (pid {cloud.pid}): S3 via proxy {cloud.s3_endpoint} "
              f"({cloud.latency_ms:g} ms, {cloud.bandwidth_mbps:g} Mbit/s), moto {cloud.moto_endpoint}; log {log}")
        return 0
    if cloud is None:
        if args.action == "down":
            print("local cloud is not running")
            return 0
        raise UserError(f"{state}: no local cloud running (start one with 'layoutlab local up')")
    if args.action == "down":
        cloud.stop()
        print(f"local cloud stopped (pid {cloud.pid})")
    elif args.action == "env":
        for key, value in cloud.env().items():
            print(f"export {key}={value}")
    else:
        status = cloud.status()
        if args.json:
            print(json.dumps(status, indent=2))
        else:
            print(f"local cloud running (pid {cloud.pid}) state {state}")
            print(f"  moto   {cloud.moto_endpoint}  (S3, DynamoDB, CloudWatch, Step Functions)")
            print(f"  S3     {cloud.s3_endpoint}  latency {cloud.latency_ms:g} ms, bandwidth {cloud.bandwidth_mbps:g} Mbit/s")
            for cid, client in status["proxy"]["clients"].items():
                print(f"  client {cid}: port {client['port']}, {client['requests']} requests, "
                      f"{client['bytes_out']} bytes out")
    return 0
