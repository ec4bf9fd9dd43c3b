"""``layoutlab results``: query the results table, in AWS or on the local cloud."""

from __future__ import annotations

import csv
import io
import json
import os
import sys

from layoutlab import settings
from layoutlab.errors import UserError

RESULT_COLUMNS = [
    "dataset", "variant", "pattern", "reader", "platform", "repetition",
    "wall_s", "peak_rss_mb", "requests", "bytes_transferred", "points_per_s", "checksum_ok",
]
OTHER_COLUMNS = ["dataset", "kind", "sk", "status", "stage", "variant", "reason"]
# one row per product (layoutlab/products/state.py): its state, what it converted, what it chose
PRODUCT_COLUMNS = ["product", "state", "study_round", "granules", "study_count", "production_granules", "checks",
                   "bytes_in", "bytes_out", "variant", "interval", "decided_by"]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "results",
        help="query benchmark results, variants, summaries and failures",
        description=(
            "Query the results table (DynamoDB), in AWS or locally, with the same code. Where: "
            "--endpoint or $AWS_ENDPOINT_URL (and --table or $LAYOUTLAB_RESULTS_TABLE) if given; else a running local cloud ('layoutlab local up'); "
            "else the results the last 'layoutlab demo' kept on disk (layoutlab.local.pipeline.snapshot_path(), "
            "by default ~/.local/state/layoutlab/results.json; delete it or run 'layoutlab demo --reset' to "
            "start afresh); else AWS. --aws forces AWS."
        ),
        epilog=(
            "examples:\n"
            "  layoutlab results                               # every result item, as a table\n"
            "  layoutlab results --pattern map-timestep --format csv > maps.csv\n"
            "  layoutlab results --dataset geos-nc-1a2b3c4d5e6f7a8b --kind FAILURE --format json\n"
            "  layoutlab results --env dev --pattern timeseries-point   # the deployed dev environment"
        ),
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    parser.add_argument("--endpoint", help="DynamoDB endpoint URL (default: $AWS_ENDPOINT_URL; see 'where' above)")
    parser.add_argument("--aws", action="store_true",
                        help="query AWS (credentials and region from the usual AWS settings) even where local results exist")
    parser.add_argument("--table", help="table name (default: $LAYOUTLAB_RESULTS_TABLE, or the one of --env)")
    parser.add_argument("--env", help="a deployed environment: its table is layoutlab-ENV-results (implies --aws)")
    parser.add_argument("--dataset", help="only this dataset id")
    parser.add_argument("--pattern", help="only results of this access pattern (uses the by-pattern index)")
    parser.add_argument("--kind", default=None, choices=["RUN", "VARIANT", "RESULT", "SUMMARY", "FAILURE", "PRODUCT", "GRANULE"],
                        help="item kind (default: RESULT, or every kind with --dataset)")
    parser.add_argument("--format", default="table", choices=["table", "csv", "json"], help="output format (default: table)")
    parser.set_defaults(func=run)


def _local_endpoint() -> str | None:
    """The endpoint of a running local cloud, if there is one."""
    from layoutlab.local.cloud import LocalCloud

    cloud = LocalCloud.from_state()
    if cloud is None:
        return None
    from layoutlab.local.cloud import use_local_credentials

    use_local_credentials()
    return cloud.moto_endpoint


def _query(store, args, kind):
    return store.items(dataset=args.dataset, pattern=args.pattern, kind=kind)


def _query_snapshot(path, args, kind) -> list[dict]:
    """Query the kept local results with the same store code, on an in-process moto table."""
    import os

    from moto import mock_aws

    from layoutlab.local import dispatch
    from layoutlab.results.store import ResultsStore, to_dynamo

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "testing")
    with mock_aws():
        store = ResultsStore(dispatch.RESULTS_TABLE)
        store.create_table()
        with store.table.batch_writer() as batch:
            for item in json.loads(path.read_text()):
                batch.put_item(Item=to_dynamo(item))
        return _query(store, args, kind)


def product_row(item: dict) -> dict:
    decision = item.get("decision") or {}
    interval = decision.get("interval")
    last = (item.get("history") or [{}])[-1]
    return {**item, "variant": decision.get("variant"),
            "interval": f"{interval[0]:.3g}-{interval[1]:.3g}" if interval else None, "decided_by": last.get("by")}


def rows_for(items: list[dict]) -> tuple[list[str], list[dict]]:
    if items and all(i.get("kind") == "RESULT" for i in items):
        return RESULT_COLUMNS, items
    if items and all(i.get("kind") == "PRODUCT" for i in items):
        return PRODUCT_COLUMNS, [product_row(i) for i in items]
    return OTHER_COLUMNS, items


def format_items(items: list[dict], fmt: str) -> str:
    from layoutlab.results.store import dumps

    if fmt == "json":
        return dumps(items)
    columns, rows = rows_for(items)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in columns})
        return out.getvalue()
    if not rows:
        return "(no items)"
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def run(args) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from layoutlab.results.store import ResultsStore

    from layoutlab.local import dispatch
    from layoutlab.local.pipeline import snapshot_path

    kind = args.kind or (None if args.dataset else "RESULT")
    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    table = args.table or (f"layoutlab-{args.env}-results" if args.env else None) or settings.value("LAYOUTLAB_RESULTS_TABLE") or None
    args.aws = args.aws or bool(args.env)
    if endpoint and not table and not args.aws:
        from layoutlab.local.cloud import LocalCloud

        local = LocalCloud.from_state()
        if local is not None and endpoint == local.moto_endpoint:
            table = dispatch.RESULTS_TABLE  # the shell of `eval "$(layoutlab local env)"`: the local cloud's table
    if not endpoint and not args.aws:
        endpoint = _local_endpoint()
        if endpoint:
            table = table or dispatch.RESULTS_TABLE
        elif snapshot_path().exists() and not table:
            items = _query_snapshot(snapshot_path(), args, kind)
            sys.stdout.write(format_items(items, args.format).rstrip("\n") + "\n")
            _print_recipes(items, args.format)
            return 0
    if not endpoint:
        from layoutlab.storage import require_aws

        require_aws("reading a deployed results table (--aws / --env)")
    store = ResultsStore(table_name=table, endpoint_url=endpoint)
    try:
        items = _query(store, args, kind)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            raise UserError(f"results table {store.table_name!r} not found at {endpoint or 'AWS'}") from None
        raise UserError(f"results table {store.table_name!r}: {error}") from None
    except BotoCoreError as error:
        raise UserError(f"cannot reach the results table at {endpoint or 'AWS'}: {error}") from None
    sys.stdout.write(format_items(items, args.format).rstrip("\n") + "\n")
    _print_recipes(items, args.format)
    return 0


def run_lines(item: dict) -> list[str]:
    """Under a RUN item: what the plan step read of the upload (``plan_io``) and the readers it did not plan."""
    lines = []
    io_ = item.get("plan_io") or {}
    if io_:
        share = (f" ({int(io_['bytes']) / int(io_['file_bytes']):.2%} of the file's {int(io_['file_bytes']):,})"
                 if io_.get("file_bytes") else "")
        lines.append(f"{item.get('dataset')}: the plan step read {int(io_['requests'])} requests, "
                     f"{int(io_['bytes']):,} bytes{share}")
    for entry in item.get("readers_not_planned") or []:
        lines.append(f"  {entry['reader']} not planned on {entry['variant']}: {entry['why']}")
    return lines


def _print_recipes(items: list[dict], fmt: str) -> None:
    """Under the table of SUMMARY items: each dataset's recommendation, the recipe to paste, and the size
    budget, costs and seeds' effect the summary holds (older summaries without them print what they have)."""
    if fmt != "table":
        return
    from layoutlab.report.tables import decision_lines

    for item in items:
        if item.get("kind") == "RUN":
            lines = run_lines(item)
            if lines:
                sys.stdout.write("\n" + "\n".join(lines) + "\n")
        if item.get("kind") == "PRODUCT" and (item.get("decision") or {}).get("variant"):
            decision = item["decision"]
            sys.stdout.write(f"\n{item['product']}: keep {decision['variant']} ({decision.get('why') or ''})\n")
            if decision.get("recipe"):
                sys.stdout.write(decision["recipe"].rstrip("\n") + "\n")
        if item.get("kind") == "SUMMARY" and (item.get("recommendation") or item.get("recipe_text")):
            sys.stdout.write(f"\n{item.get('dataset')}: {item.get('recommendation') or ''}\n")
            if item.get("recipe_text"):
                sys.stdout.write(item["recipe_text"].rstrip("\n") + "\n")
            lines = decision_lines(item)
            if lines:
                sys.stdout.write("\n".join(lines) + "\n")
