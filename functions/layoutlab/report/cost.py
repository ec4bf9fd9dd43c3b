"""What a layout costs in AWS: $ per 1,000 accesses and storage $ per month.

Prices come from a dated JSON file (``prices/aws-us-east-1-2026-11.json``: list
prices, x86, first tier, with its sources and what was verified); measured
quantities come from the result records. Nothing here is estimated that the
records measured.

Per access (one benchmark case = one access of its pattern):
  Lambda   memory_GB x billed seconds x $/GB-s + $/request, billed duration =
           wall_s rounded up to 1 ms. wall_s is open+select+load: the
           invocation's cold start (imports) is not in it, so this is the
           cost of the access itself in a warm function.
  Fargate  (vCPU x $/vCPU-h + memory_GB x $/GB-h) x billed time. Fargate
           bills per second with a one-minute minimum *per task*: we price
           1,000 accesses run one after another in one task, billed
           max(60 s, ceil(1000 x wall_s)) — a task per access would pay the
           minute 1,000 times, which nobody would do on purpose.
  S3       measured GET requests x $/GET (HEADs are priced as GETs: S3 bills
           HEAD in the same "GET, SELECT and all other requests" tier), and
           measured LIST requests x $/PUT (S3 bills LIST in the "PUT, COPY,
           POST, LIST" tier; records counted at the client say list_requests).
Storage: the variant's size_bytes x $/GB-month (GB = 2**30 bytes).

Per layout (``layout_costs``), what choosing it costs:
  conversion  $ once: the VARIANT item's convert_s on the platform it was
              converted on (its ``platform``), priced like an access there
              (Lambda: GB-s and one request per invocation, a fanned-out
              rechunk's work units each an invocation; Fargate: one task,
              the one-minute minimum). References over a paged copy add the
              copy's conversion. S3 requests made while converting are not
              recorded, so not priced.
  storage     $ per month of the bytes that must stay in S3 to read it
              (``budget.storage_bytes``: references count what they point at).
  reads       $ per 1,000 reads of each pattern (``cost_table``: compute and
              invocations from the measured read time, S3 requests counted),
              and the S3-request part of it alone.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from layoutlab.errors import BadInputFile

PRICES_DIR = Path(__file__).parent / "prices"
DEFAULT_PRICES = PRICES_DIR / "aws-us-east-1-2026-11.json"
ACCESSES = 1000
GIB = 2**30
REQUIRED_PRICES = {
    "lambda": ("usd_per_gb_second", "usd_per_million_requests"),
    "fargate": ("usd_per_vcpu_hour", "usd_per_gb_hour", "minimum_billed_s"),
    "s3": ("usd_per_1000_get", "usd_per_1000_put", "usd_per_gb_month"),
}


def load_prices(path: str | Path | None = None) -> dict:
    """The price file at ``path`` (default: the dated us-east-1 file), checked for every price used."""
    path = Path(path) if path else DEFAULT_PRICES
    try:
        prices = json.loads(path.read_text())
    except FileNotFoundError:
        raise BadInputFile(path, "price file not found") from None
    except json.JSONDecodeError as error:
        raise BadInputFile(path, f"is not JSON: {error}") from None
    for section, keys in REQUIRED_PRICES.items():
        for key in keys:
            value = (prices.get(section) or {}).get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise BadInputFile(path, f"needs a non-negative number at {section}.{key}, got {value!r}")
    for key in ("source", "retrieved"):
        if not prices.get(key):
            raise BadInputFile(path, f"needs '{key}' (where and when the prices were read)")
    prices["path"] = str(path)
    return prices


def lambda_access_usd(wall_s: float, memory_mb: float, prices: dict) -> dict:
    """Compute and request $ of one Lambda access of ``wall_s`` seconds."""
    billed_ms = math.ceil(wall_s * 1000 - 1e-9)  # rounded up to the next 1 ms (1e-9: float noise on exact ms)
    compute = (memory_mb / 1024) * (billed_ms / 1000) * prices["lambda"]["usd_per_gb_second"]
    request = prices["lambda"]["usd_per_million_requests"] / 1e6
    return {"billed_ms": billed_ms, "compute_usd": compute, "request_usd": request}


def fargate_batch_usd(wall_s: float, vcpu: float, memory_mb: float, prices: dict, accesses: int = ACCESSES) -> dict:
    """Compute $ of ``accesses`` accesses run back to back in one Fargate task (see module docstring)."""
    fargate = prices["fargate"]
    billed_s = max(float(fargate["minimum_billed_s"]), math.ceil(accesses * wall_s - 1e-9))
    per_second = (vcpu * fargate["usd_per_vcpu_hour"] + (memory_mb / 1024) * fargate["usd_per_gb_hour"]) / 3600
    return {"billed_s": billed_s, "compute_usd": billed_s * per_second}


def storage_usd_per_month(size_bytes: float, prices: dict) -> float:
    return size_bytes / GIB * prices["s3"]["usd_per_gb_month"]


def _profile(record: dict) -> dict:
    """kind, memory_mb, vcpu of the record's platform (from the record, else from its name)."""
    profile = record.get("platform_profile") or {}
    if profile.get("kind") and profile.get("memory_mb"):
        return profile
    from layoutlab.platforms import platform_profile

    return platform_profile(record["platform"]).to_dict()


def cost_table(records: list[dict], variants: dict[str, dict] | None = None, prices: dict | None = None) -> list[dict]:
    """One row per variant x pattern x platform (best reader): $ per 1,000 accesses, and storage $/month.

    Uses the median wall time and median GET+HEAD count of the good repetitions
    of the variant's fastest reader for the pattern (the reader named in the row).
    """
    from layoutlab.report.decision import best_readers, good_results, median_times

    prices = prices or load_prices()
    variants = variants or {}
    best = best_readers(median_times(records))
    requests: dict[tuple, list[float]] = defaultdict(list)
    lists: dict[tuple, list[float]] = defaultdict(list)
    profiles: dict[str, dict] = {}
    for r in good_results(records):
        profiles.setdefault(r["platform"], _profile(r))
        gets = (r.get("get_requests") or 0) + (r.get("head_requests") or 0)
        if r.get("get_requests") is None and r.get("requests") is not None:
            gets = r["requests"]
        if r.get("request_counting", "proxy") != "none":
            requests[(r["platform"], r["pattern"], r["variant"], r["reader"])].append(gets)
            lists[(r["platform"], r["pattern"], r["variant"], r["reader"])].append(r.get("list_requests") or 0)
    rows = []
    for (platform, pattern, variant), (wall, reader) in sorted(best.items()):
        profile = profiles[platform]
        counted = requests.get((platform, pattern, variant, reader))
        gets = statistics.median(counted) if counted else None
        listed = lists.get((platform, pattern, variant, reader))
        list_requests = statistics.median(listed) if listed else None
        row = {"variant": variant, "pattern": pattern, "platform": platform, "reader": reader,
               "kind": profile["kind"], "memory_mb": profile["memory_mb"], "vcpu": profile.get("vcpu"),
               "wall_s": wall, "get_requests": gets, "list_requests": list_requests, "accesses": ACCESSES}
        if profile["kind"] == "lambda":
            one = lambda_access_usd(wall, profile["memory_mb"], prices)
            row.update(billed="per access: %d ms" % one["billed_ms"],
                       compute_usd=one["compute_usd"] * ACCESSES, invoke_usd=one["request_usd"] * ACCESSES)
        else:
            batch = fargate_batch_usd(wall, float(profile.get("vcpu") or 1), profile["memory_mb"], prices)
            row.update(billed=f"one task: {batch['billed_s']:.0f} s", compute_usd=batch["compute_usd"], invoke_usd=0.0)
        row["s3_get_usd"] = gets * ACCESSES / 1000 * prices["s3"]["usd_per_1000_get"] if gets is not None else None
        row["s3_list_usd"] = (list_requests * ACCESSES / 1000 * prices["s3"]["usd_per_1000_put"]
                              if list_requests is not None else None)
        row["usd_per_1000"] = (row["compute_usd"] + row["invoke_usd"] + (row["s3_get_usd"] or 0.0)
                               + (row["s3_list_usd"] or 0.0))
        size = (variants.get(variant) or {}).get("size_bytes")
        row["size_bytes"] = size
        row["storage_usd_per_month"] = storage_usd_per_month(size, prices) if size is not None else None
        row["prices"] = prices.get("name") or prices.get("path")
        rows.append(row)
    return rows


def conversion_usd(item: dict, prices: dict) -> dict:
    """$ of making one variant once (not counting what it references), and how it was priced."""
    from layoutlab.errors import UserError
    from layoutlab.platforms import platform_profile

    if item.get("variant_kind") == "original":
        return {"usd": 0.0, "convert_s": 0.0, "platform": None, "billed": "no conversion"}
    convert_s = item.get("convert_s")
    platform = item.get("platform")
    if convert_s is None:
        return {"usd": None, "convert_s": None, "platform": platform, "billed": "conversion time not recorded"}
    try:
        profile = platform_profile(platform) if platform else None
    except UserError:
        profile = None
    if profile is None:
        why = f"platform {platform!r} unknown" if platform else "the platform it was converted on was not recorded"
        return {"usd": None, "convert_s": float(convert_s), "platform": platform, "billed": why}
    convert_s = float(convert_s)
    if profile.kind == "lambda":
        # a fanned-out rechunk: its work units ran as invocations of their own besides the publish step
        invocations = 1 + int(item.get("units_done") or (item.get("rechunk") or {}).get("units") or 0)
        one = lambda_access_usd(convert_s, profile.memory_mb, prices)
        usd = one["compute_usd"] + invocations * one["request_usd"]
        billed = f"Lambda {profile.memory_mb} MB, {one['billed_ms']} ms, {invocations} invocation(s)"
    else:
        batch = fargate_batch_usd(convert_s, profile.vcpu, profile.memory_mb, prices, accesses=1)
        usd = batch["compute_usd"]
        billed = f"Fargate {profile.vcpu:g} vCPU {profile.memory_mb} MB, {batch['billed_s']:.0f} s"
    return {"usd": usd, "convert_s": convert_s, "platform": platform, "billed": billed}


def layout_costs(records: list[dict], variants: dict[str, dict], prices: dict | None = None) -> dict:
    """platform -> variant -> what choosing the variant costs (see the module docstring).

    Each row: ``conversion_usd`` (once, with what it references; None when a conversion
    time or platform was not recorded), ``conversion`` (how each step was priced),
    ``storage_bytes`` and ``storage_usd_per_month``, ``read_usd_per_1000`` and
    ``requests_usd_per_1000`` per pattern (None where requests were not counted), and
    the reader each pattern's read was priced with.
    """
    from layoutlab.report.budget import making_order, storage_bytes

    prices = prices or load_prices()
    reads = cost_table(records, variants, prices)
    out: dict[str, dict] = {}
    for row in reads:
        variant = row["variant"]
        entry = out.setdefault(row["platform"], {}).get(variant)
        if entry is None:
            steps = {name: conversion_usd(variants.get(name) or {}, prices) for name in making_order(variant, variants)}
            known = [s["usd"] for s in steps.values()]
            stored = storage_bytes(variant, variants)
            entry = {"variant": variant, "conversion": steps,
                     "conversion_usd": None if any(u is None for u in known) else sum(known),
                     "storage_bytes": stored,
                     "storage_usd_per_month": storage_usd_per_month(stored, prices) if stored is not None else None,
                     "read_usd_per_1000": {}, "requests_usd_per_1000": {}, "reader": {}}
            out[row["platform"]][variant] = entry
        counted = row["s3_get_usd"] is not None
        entry["read_usd_per_1000"][row["pattern"]] = row["usd_per_1000"]
        entry["requests_usd_per_1000"][row["pattern"]] = ((row["s3_get_usd"] or 0.0) + (row["s3_list_usd"] or 0.0)
                                                         if counted else None)
        entry["reader"][row["pattern"]] = row["reader"]
    return out


def storage_costs(variants: dict[str, dict], prices: dict | None = None) -> list[dict]:
    """Storage $ per month of each variant with a recorded size, cheapest first."""
    prices = prices or load_prices()
    rows = [{"variant": name, "size_bytes": item["size_bytes"],
             "storage_usd_per_month": storage_usd_per_month(item["size_bytes"], prices)}
            for name, item in variants.items() if item.get("size_bytes") is not None]
    return sorted(rows, key=lambda r: (r["storage_usd_per_month"], r["variant"]))


def one_run_usd(seconds: float, platform: str, prices: dict) -> float:
    """One invocation of ``seconds`` on ``platform`` (a Lambda access, or one Fargate task's compute); a local
    platform priced as the AWS platform of the same memory."""
    from layoutlab.platforms import platform_profile

    profile = platform_profile(platform)
    if profile.kind == "lambda":
        one = lambda_access_usd(seconds, profile.memory_mb, prices)
        return one["compute_usd"] + one["request_usd"]
    return fargate_batch_usd(seconds, profile.vcpu, profile.memory_mb, prices, accesses=1)["compute_usd"]


def cases_usd(results: list[dict], prices: dict) -> float:
    """Every benchmark case's wall time priced as one run on its platform."""
    return sum(one_run_usd(float(r["wall_s"]), r.get("platform") or "lambda-1769", prices)
               for r in results if r.get("wall_s") is not None)


def product_spent(granules: list[dict], study_items: dict[str, list[dict]], prices: dict) -> dict:
    """What a product has cost so far, as measured: its study granules' conversions and benchmark cases, and its
    production (and check) granules' conversions, each priced on the platform it ran on (local platforms as the
    AWS platform of the same memory). ``granules``: its GRANULE items; ``study_items``: dataset -> items."""
    study_usd = 0.0
    for items in study_items.values():
        study_usd += sum(conversion_usd(v, prices).get("usd") or 0.0 for v in items if v.get("kind") == "VARIANT")
        study_usd += cases_usd([i for i in items if i.get("kind") == "RESULT"], prices)
    converted = [g for g in granules if g.get("role") in ("production", "check") and g.get("convert_s") is not None
                 and float(g["convert_s"]) > 0]
    production_usd = sum(one_run_usd(float(g["convert_s"]), g.get("platform") or "lambda-3008", prices)
                         for g in converted)
    return {"study_usd": study_usd, "production_usd": production_usd, "total_usd": study_usd + production_usd,
            "priced_granules": len(converted) + len(study_items)}
