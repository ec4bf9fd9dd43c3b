"""``layoutlab backfill s3://bucket/prefix/ --product NAME``: convert an archive with a product's layout."""

from __future__ import annotations

import json
import sys

from layoutlab.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "backfill", help="convert every object under an S3 prefix with a decided product's layout (one Distributed Map)",
        description="Runs the backfill state machine (stepfunctions/backfill.asl.json): every object under the prefix "
                    "is converted as a production granule of the product (its decided variant, under "
                    "products/<product>/ in the outputs bucket), counted on the PRODUCT item. On the local cloud the "
                    "listing is written as pages of batches first (moto reads one listing page and has no ItemBatcher); "
                    "with --env, the deployed state machine lists the prefix itself and batches small granules.")
    parser.add_argument("url", help="s3://bucket/prefix/ of the archive")
    parser.add_argument("--product", required=True, help="a decided product ('layoutlab product show NAME')")
    parser.add_argument("--env", help="a deployed environment: start layoutlab-ENV-backfill in AWS")
    parser.add_argument("--batch", type=int, default=10,
                        help="granules per child execution, converted one after another by one task (ItemBatcher in "
                             "AWS, the item pages locally; default 10)")
    parser.add_argument("--max-concurrency", type=int, default=None,
                        help="child executions at once (default: 1 locally, 100 in AWS)")
    parser.add_argument("--tolerated-failure-percentage", type=float, default=10.0)
    parser.add_argument("--page-items", type=int, default=1000, help="items per page of the local item list")
    parser.add_argument("--no-wait", action="store_true", help="start and print the execution, do not wait")
    parser.set_defaults(func=run)


def run(args) -> int:
    from layoutlab.storage import S3Location

    location = S3Location.parse(args.url)
    prefix = location.key
    if args.env:
        import boto3

        sfn = boto3.client("stepfunctions")
        arn = next((m["stateMachineArn"] for page in sfn.get_paginator("list_state_machines").paginate()
                    for m in page["stateMachines"] if m["name"] == f"layoutlab-{args.env}-backfill"), None)
        if arn is None:
            raise UserError(f"no state machine layoutlab-{args.env}-backfill in this account and region")
        execution = {"product": args.product, "bucket": location.bucket, "prefix": prefix,
                     "max_concurrency": args.max_concurrency or 100,
                     "tolerated_failure_percentage": args.tolerated_failure_percentage,
                     "batch": {"max_items": args.batch}, "listing": {"source": "s3"}}
        response = sfn.start_execution(stateMachineArn=arn, input=json.dumps(execution))
        sys.stdout.write(f"started {response['executionArn']}\n")
        return 0
    import boto3

    from layoutlab.local import backfill, dispatch
    from layoutlab.local.cloud import LocalCloud, use_local_credentials
    from layoutlab.products import state
    from layoutlab.results.store import ResultsStore

    cloud = LocalCloud.from_state()
    if cloud is None:
        raise UserError("no local cloud running: 'layoutlab local up' (or --env ENV for AWS)")
    use_local_credentials()
    kwargs = {"endpoint_url": cloud.moto_endpoint, "region_name": dispatch.REGION}
    s3, sfn = boto3.client("s3", **kwargs), boto3.client("stepfunctions", **kwargs)
    store = ResultsStore(dispatch.RESULTS_TABLE, endpoint_url=cloud.moto_endpoint)
    product = state.require_product(store, args.product)
    if product["state"] == state.STUDYING:
        raise UserError(f"product {args.product!r} is not decided (studying): nothing converted")
    started = backfill.start_backfill(s3, sfn, location.bucket, prefix, args.product, page_items=args.page_items,
                                      max_concurrency=args.max_concurrency or 1,
                                      tolerated_failure_percentage=args.tolerated_failure_percentage,
                                      batch=args.batch)
    if started["execution_arn"] is None:
        sys.stdout.write(f"nothing under {args.url}: no backfill started\n")
        return 0
    sys.stdout.write(f"{started['items']} objects in {started['pages']} pages of batches of up to {args.batch}; "
                     f"started {started['execution_arn']}\n")
    if args.no_wait:
        return 0
    described = backfill.wait(sfn, started["execution_arn"])
    product = state.require_product(store, args.product)
    sys.stdout.write(f"{described['status']}: product {args.product} now {product['production_granules']} production "
                     f"granules, {product['bytes_in']} bytes in, {product['bytes_out']} bytes out, "
                     f"{product['failed_granules']} failed\n")
    return 0 if described["status"] == "SUCCEEDED" else 1
