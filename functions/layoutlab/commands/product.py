"""``layoutlab product``: a product's state and decision; a person chooses or overrides its variant."""

from __future__ import annotations

import getpass
import json
import os
import sys

from layoutlab import settings
from layoutlab.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "product", help="show a product, or choose / override its layout (products of granules: issue 35)",
        description="A product's state (studying, decided, production), counts and decision, from the results "
                    "table (where: as 'layoutlab results'); 'decide' records a person's choice of variant with who "
                    "(the OS user, or the AWS caller identity with --aws) and why.")
    parser.add_argument("--endpoint", help="DynamoDB endpoint URL (default: $AWS_ENDPOINT_URL, else a running local cloud)")
    parser.add_argument("--aws", action="store_true", help="the deployed table (credentials from the usual AWS settings)")
    parser.add_argument("--table", help="table name (default: $LAYOUTLAB_RESULTS_TABLE, or the local cloud's)")
    actions = parser.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="the product's item and granules")
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    decide = actions.add_parser("decide", help="choose or override the product's variant")
    decide.add_argument("name")
    decide.add_argument("--variant", required=True, help="a variant measured in the product's study")
    decide.add_argument("--reason", default="", help="why (kept in the decision history)")
    decide.add_argument("--by", help="who decides (default: the OS user; with --aws the caller's ARN)")
    estimate = actions.add_parser("estimate", help="$ of the study, of converting an archive, storage before and after")
    estimate.add_argument("name")
    estimate.add_argument("--granules", type=int, required=True, help="granules in the archive")
    estimate.add_argument("--granule-size", required=True, help="bytes per granule (e.g. 120MiB)")
    estimate.add_argument("--prices", help="price file (default: the dated us-east-1 file)")
    estimate.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def _store(args):
    from layoutlab.results.store import ResultsStore

    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    table = args.table or settings.value("LAYOUTLAB_RESULTS_TABLE") or None
    if not endpoint and not args.aws:
        from layoutlab.commands.results import _local_endpoint
        from layoutlab.local import dispatch

        endpoint = _local_endpoint()
        if endpoint is None:
            raise UserError("no results table to read: start the local cloud ('layoutlab local up'), give "
                            "--endpoint, or --aws")
        table = table or dispatch.RESULTS_TABLE
    return ResultsStore(table_name=table, endpoint_url=endpoint)


def who(args) -> str:
    if args.by:
        return args.by
    user = getpass.getuser()
    if args.aws:
        import boto3

        return f"{user} ({boto3.client('sts').get_caller_identity()['Arn']})"
    return user


def run(args) -> int:
    from layoutlab.commands.results import format_items
    from layoutlab.products import flow, state
    from layoutlab.results.store import dumps

    store = _store(args)
    if args.action == "decide":
        item = flow.decide_by_person(store, args.name, args.variant, by=who(args), reason=args.reason)
        last = item["history"][-1]
        sys.stdout.write(f"{args.name}: {last['event']} {args.variant} by {last['by']} ({item['state']})\n")
        return 0
    if args.action == "estimate":
        return print_estimate(store, args)
    item = state.require_product(store, args.name)
    granules = state.granules(store, args.name)
    if args.json:
        sys.stdout.write(dumps([item, *granules]) + "\n")
        return 0
    sys.stdout.write(format_items([item], "table") + "\n")
    decision = item.get("decision") or {}
    if decision.get("why"):
        sys.stdout.write(f"decision: {decision['why']}\n")
    for entry in item.get("history") or []:
        sys.stdout.write(f"  {entry['at']} {entry['event']}: {entry.get('variant')} by {entry['by']}: {entry['reason']}\n")
    for granule in granules:
        sys.stdout.write(f"  {granule['dataset']}: {granule['role']} #{granule['number']} {granule['status']}"
                         + (f" ratio {granule['ratio']:.3g}" if granule.get("ratio") is not None else "")
                         + (f" drift: {granule['drift']}" if granule.get("drift") else "") + "\n")
    return 0


def print_estimate(store, args) -> int:
    """``layoutlab product estimate`` and ``layoutlab estimate --product``: from the product's measured granules."""
    from layoutlab.products import estimate, state
    from layoutlab.report.cost import load_prices
    from layoutlab.units import parse_size

    item = state.require_product(store, args.name)
    granules = state.granules(store, args.name)
    studied = [g["dataset"] for g in granules if g.get("role") == "study" and g.get("status") == "STUDIED"]
    found = estimate.product_estimate(item, granules, {d: store.items(dataset=d) for d in studied},
                                      count=args.granules, granule_bytes=parse_size(args.granule_size, "--granule-size"),
                                      prices=load_prices(args.prices))
    sys.stdout.write((json.dumps(found, indent=2, default=str) if args.json else estimate.render(found)) + "\n")
    return 0
