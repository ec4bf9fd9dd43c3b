"""``layoutlab report``: one self-contained HTML page from the results table (or kept results)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from layoutlab import settings
from layoutlab.errors import BadInputFile, UserError

DESCRIPTION = """\
Write one self-contained HTML page (no network needed to view it: figures are embedded,
CSS inline, no scripts) with a section per dataset: the recommendation in one sentence,
heatmaps of wall time and peak memory over the chunk grid (cells the read-time model
predicted are hatched), throughput against chunk size, requests and bytes per variant and
reader, size overhead, the Pareto front, and the tables (best variant per pattern and its
bias, choices, cost in AWS, the model and its held-out error, failures). The PNGs are also
written beside the page, under OUT's stem + '_files/'.

Where the results come from: --results FILE (a JSON list of items, as the demo keeps them or
'layoutlab results --dataset ID --format json' prints them); else the DynamoDB table (--table,
--env, --endpoint / $AWS_ENDPOINT_URL, as 'layoutlab results'); else a running local cloud;
else the results the last 'layoutlab demo' kept on disk."""

EPILOG = """\
examples:
  layoutlab report --out report.html                       # every dataset the last demo kept
  layoutlab report --dataset geos-sample-nc-b81c594d054b422c \\
      --mix timeseries-point=0.7,map-timestep=0.3 --out geos.html
  layoutlab report --results results.json --out report.html
  layoutlab report --env dev --out dev-report.html         # the deployed dev environment's table
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report", help="write a self-contained HTML report (decision, figures, tables) per dataset",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="report.html", type=Path, help="the HTML file to write (default: %(default)s)")
    parser.add_argument("--dataset", help="only this dataset id (default: every dataset in the results)")
    parser.add_argument("--mix", help="workload mix, pattern shares summing to 1, e.g. "
                                      "timeseries-point=0.7,map-timestep=0.3 (default: balance time series and maps)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--results", type=Path, help="a JSON list of result-table items (see above)")
    where.add_argument("--table", help="DynamoDB table name (default: $LAYOUTLAB_RESULTS_TABLE, or the one of --env)")
    where.add_argument("--env", help="a deployed environment: its table is layoutlab-ENV-results (AWS)")
    parser.add_argument("--endpoint", help="DynamoDB endpoint URL (default: $AWS_ENDPOINT_URL)")
    parser.set_defaults(func=run)


def load_items_file(path: Path) -> list[dict]:
    try:
        items = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInputFile(path, "no such file") from None
    except OSError as error:
        raise BadInputFile(path, f"cannot be read ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise BadInputFile(path, f"is not JSON: {error}") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise BadInputFile(path, "is not a JSON list of result-table items (objects)")
    return items


def load_items(args) -> tuple[list[dict], str]:
    """The items to report on and a description of where they came from."""
    from layoutlab.local import dispatch
    from layoutlab.local.pipeline import snapshot_path

    if args.results:
        return load_items_file(args.results), str(args.results)
    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    table = args.table or (f"layoutlab-{args.env}-results" if args.env else None) or settings.value("LAYOUTLAB_RESULTS_TABLE") or None
    if not endpoint and not args.env and not args.table:
        from layoutlab.commands.results import _local_endpoint

        endpoint = _local_endpoint()
        if endpoint:
            table = table or dispatch.RESULTS_TABLE
        elif snapshot_path().exists() and not table:
            return load_items_file(snapshot_path()), f"{snapshot_path()} (kept by 'layoutlab demo')"
        elif not table:
            raise UserError(f"no results: no --results FILE, no --table/--env, no running local cloud and no kept "
                            f"demo results at {snapshot_path()}; run 'layoutlab demo' first")
    return _scan_table(table, endpoint, args.dataset), f"table {table or '(default)'} at {endpoint or 'AWS'}"


def _scan_table(table: str | None, endpoint: str | None, dataset: str | None) -> list[dict]:
    from botocore.exceptions import BotoCoreError, ClientError

    from layoutlab.results.store import ResultsStore

    if not endpoint:
        from layoutlab.storage import require_aws

        require_aws("reading a deployed results table (--table / --env)")
    store = ResultsStore(table_name=table, endpoint_url=endpoint)
    try:
        return store.items(dataset=dataset)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code", "") == "ResourceNotFoundException":
            raise UserError(f"results table {store.table_name!r} not found at {endpoint or 'AWS'}") from None
        raise UserError(f"results table {store.table_name!r}: {error}") from None
    except BotoCoreError as error:
        raise UserError(f"cannot reach the results table at {endpoint or 'AWS'}: {error}") from None


def run(args) -> int:
    from layoutlab.report.decision import parse_mix
    from layoutlab.report.html import write_report

    mix = parse_mix(args.mix) if args.mix is not None else None  # a bad mix fails before any loading
    items, source = load_items(args)
    if not items:
        raise UserError(f"no results in {source}" + (f" for dataset {args.dataset!r}" if args.dataset else ""))
    print(f"reporting on {source} ...", file=sys.stderr)
    command = "layoutlab report" + "".join(f" {a}" for a in sys.argv[2:]) if sys.argv[1:2] == ["report"] else "layoutlab report"
    written = write_report(items, args.out, dataset=args.dataset, mix=mix, source=source, command=command)
    for dataset in written.datasets:
        print(f"{dataset}: {written.sentences[dataset]}")
    print(f"report: {written.html} ({len(written.pngs)} figures, also in {written.html.parent / (written.html.stem + '_files')}/)")
    return 0
