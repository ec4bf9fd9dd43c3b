"""``layoutlab plan FILE [--plan NAME] [--json]``: the cases the pipeline would run for a file, without running them.

A dry run of the plan step (``pipeline/planning.py``): what the file is (one of the samples' shapes,
or its structure's role), the variants the plan gives it, and every benchmark case (pattern, variant,
reader, platform, repetition, the variable read). Nothing is converted, uploaded or recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="print the benchmark cases the pipeline would run for a file (a dry run)",
        description=(
            "Read FILE's structure (metadata and small coordinate arrays only) and print the cases the "
            "pipeline's plan step would make of it with the plan NAME: patterns (the published presets "
            "for the samples' shapes, else the pattern families fitted to the file's grids, swaths, "
            "tables, radar volumes or station series), variants, readers and platforms. Nothing is "
            "converted or recorded. A file no pattern can read gets one line saying what it holds."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="local path or s3://bucket/key")
    parser.add_argument("--plan", metavar="NAME", default="default",
                        help="'default', 'demo', or a plan's JSON file (a partial plan's keys replace the "
                             "default's, as an upload's named plan does)")
    parser.add_argument("--json", action="store_true",
                        help="print {file, kind, role, plan, variants, patterns, skipped, cases: [{pattern, "
                             "family, variant, reader, platform, repetition, variable, params}]}")
    parser.set_defaults(func=run)


def _load_plan(name: str) -> dict:
    from importlib import resources

    from layoutlab.errors import UserError
    from layoutlab.pipeline import plan as plans

    if name == "default":
        return plans.merge_plan(None)
    builtin = resources.files("layoutlab.pipeline").joinpath(f"{name}_plan.json")
    if "/" not in name and not name.endswith(".json") and builtin.is_file():
        return plans.merge_plan(json.loads(builtin.read_text()))
    path = Path(name)
    if not path.is_file():
        raise UserError(f"--plan {name}: neither a built-in plan (default, demo) nor a plan file")
    try:
        override = json.loads(path.read_text())
    except ValueError as error:
        raise UserError(f"--plan {name}: not JSON ({error})") from None
    return plans.merge_plan(override)


def dry_run(location: str, plan: dict) -> dict:
    """What the plan step would plan for ``location`` (see the module's docstring)."""
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.facts import dataset_facts

    from layoutlab.ceilings import Ceilings

    from layoutlab.bench.accounting import RequestCounter
    from layoutlab.storage import is_s3_url

    counter = RequestCounter()
    facts = plans.fit_family_cases(dataset_facts(location, plan, counter), Ceilings())  # (this environment's defaults)
    if facts.kind == "other":
        from layoutlab.errors import BadInputFile

        raise BadInputFile(location, (facts.structure or {}).get("why_not") or "layoutlab has no access patterns for it")
    specs = [{**s, "uri": f"s3://<outputs>/variants/<dataset>/{s['name']}"} for s in plans.variant_specs(plan, facts)]
    cases = plans.expand_cases(plan, facts, "<dataset>", specs)
    described = {c["label"]: c for c in plans.family_labels(facts.family_cases)}
    out_cases = []
    for case in cases:
        params = case.get("params") or {}
        family = described.get(case["pattern"], {})
        variable = family.get("variable") or params.get("variable") or (
            f"{params['beam']}/heights/{params.get('variable', 'h_ph')}" if params.get("beam") else "(every object)")
        out_cases.append({"pattern": case["pattern"], "family": family.get("pattern", case["pattern"]),
                          "variant": case["variant"], "reader": case["reader"], "platform": case["platform"],
                          "repetition": case["repetition"], "variable": variable, "params": params})
    patterns = []
    for case in out_cases:
        if case["pattern"] not in [p["pattern"] for p in patterns]:
            family = described.get(case["pattern"], {})
            patterns.append({"pattern": case["pattern"], "family": case["family"], "variable": case["variable"],
                             "role": family.get("role", facts.kind), "why": family.get("why", "the preset of the "
                             "published comparison for this shape")})
    return {"file": location, "kind": facts.kind, "role": facts.role or facts.kind, "plan": plan.get("name"),
            "variants": [s["name"] for s in specs], "patterns": patterns, "skipped": list(facts.family_skipped),
            "readers_not_planned": plans.not_planned_list(plan, facts, specs),
            # the S3 requests and bytes the plan step's reading took (an s3:// location; a path reads no S3)
            **({"plan_io": {"requests": counter.snapshot()["requests"],
                            "bytes": counter.snapshot()["bytes_transferred"]}} if is_s3_url(location) else {}),
            "cases": out_cases}


def run(args) -> int:
    from layoutlab.guard import run_guarded  # a damaged file that makes libhdf5 spin or crash: a clean error

    plan = _load_plan(args.plan)
    result = run_guarded(dry_run, args.file, plan, path=args.file)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['file']}: {result['role']} ({'preset patterns' if result['kind'] in ('grid', 'granule') else 'pattern families'}), "
          f"plan {result['plan']!r}: {len(result['cases'])} cases = {len(result['patterns'])} patterns x "
          f"{len(result['variants'])} variants x readers x platforms x repetitions (dry run: nothing converted or recorded)")
    print("patterns:")
    for p in result["patterns"]:
        print(f"  {p['pattern']:<18} {p['role']:<10} {p['variable']}  ({p['why']})")
    if result["skipped"]:
        print("not planned:")
        for line in result["skipped"]:
            print(f"  {line}")
    if result["readers_not_planned"]:
        print("readers not planned:")
        for entry in result["readers_not_planned"]:
            print(f"  {entry['reader']} on {entry['variant']}: {entry['why']}")
    if "plan_io" in result:
        print(f"plan step read {result['plan_io']['requests']} requests, {result['plan_io']['bytes']:,} bytes")
    print("variants: " + ", ".join(result["variants"]))
    by = Counter((c["variant"], c["reader"], c["platform"]) for c in result["cases"])
    print("cases by variant, reader, platform:")
    for (variant, reader, platform), n in by.items():
        print(f"  {variant:<32} {reader:<26} {platform:<16} {n}")
    return 0
