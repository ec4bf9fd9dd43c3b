"""``layoutlab estimate FILE``: what a plan's study of one file takes, read from its structure model.

Here, not in report/: it makes the variants and cases exactly as the plan step does (pipeline.plan,
pipeline.facts), and report/ never imports the pipeline; the measured rates and the per-variant
arithmetic it uses are report/estimate.py's.
"""

from __future__ import annotations

from layoutlab.report.estimate import rechunk_seconds, zarr_chunks


def estimate_file(location: str, plan: dict, *, rechunk: dict, repack: dict, compression: dict,
                  input_bytes: int) -> dict:
    """What the plan's study of the file at ``location`` takes, from its structure model (metadata only): the
    variants and benchmark cases the plan step would make (first round, and with every repetition round), and
    each variant's conversion time on one core and storage, from the measured rates."""
    from layoutlab.ceilings import Ceilings
    from layoutlab.convert.page_budget import DEFAULT_BUDGET, parse_budget
    from layoutlab.errors import BadInputFile
    from layoutlab.pipeline import plan as plans
    from layoutlab.pipeline.facts import dataset_facts
    from layoutlab.structure import file_structure

    facts = plans.fit_family_cases(dataset_facts(location, plan), Ceilings())
    if facts.kind == "other":
        raise BadInputFile(location, (facts.structure or {}).get("why_not") or "layoutlab has no access patterns for it")
    structure = file_structure(location)
    declared = sum(a.nbytes for a in structure.arrays.values() if not a.outside_file)
    # a Zarr copy keeps at most what the measured copies kept, and no more than the file's own compression keeps
    # (its filters: GPM's 4.8 MB of arrays stored in 0.3 MB)
    own = input_bytes / declared if declared else 1.0
    zarr_ratio = min(compression["ratio"], own)
    specs = [{**s, "uri": f"s3://<outputs>/variants/<dataset>/{s['name']}"} for s in plans.variant_specs(plan, facts)]
    cases = plans.expand_cases(plan, facts, "<dataset>", specs)
    schedule = plans.repetition_schedule(plan)
    variants = []
    for spec in specs:
        kind = spec["kind"]
        entry = {"variant": spec["name"], "kind": kind}
        if kind == "original":
            entry.update(convert_s=0.0, stored_bytes=0, how="the upload itself")
        elif kind in ("repack-paged", "rechunked-paged"):
            budget = parse_budget(spec.get("size_budget", DEFAULT_BUDGET))
            overhead = min(repack["size_overhead"], budget) if spec.get("page_size") == "auto" else repack["size_overhead"]
            entry.update(convert_s=repack["s_per_mib"] * input_bytes / 2**20,
                         stored_bytes=int(input_bytes * (1 + overhead)),
                         how=f"the input at the measured repack rate, +{overhead:.1%} size")
        elif kind == "rechunk-zarr":
            mib, written = zarr_chunks(structure, spec)
            entry.update(convert_s=rechunk_seconds(rechunk, mib, written), chunks_written=written,
                         stored_bytes=int(mib * 2**20 * zarr_ratio),
                         how=f"{mib:.1f} MiB declared, {written:,} chunks, one stage, stored at {zarr_ratio:.2f}")
        else:  # references (kerchunk, Icechunk virtual chunks) or a kind no rate was measured for
            entry.update(convert_s=None, stored_bytes=None,
                         how="references only: no data copied, no measured rate" if spec.get("format") in
                             ("kerchunk", "icechunk") else "no measured rate for this kind")
        variants.append(entry)
    timed = [v["convert_s"] for v in variants if v["convert_s"] is not None]
    return {"file": location, "role": facts.role or facts.kind, "input_bytes": input_bytes, "declared_bytes": declared,
            "variants": variants, "cases_first_round": len(cases),
            "cases_at_most": len(cases) * schedule.max // max(1, schedule.first),
            "repetitions": {"first": schedule.first, "max": schedule.max},
            "convert_single_core_s": sum(timed), "convert_longest_s": max(timed, default=0.0),
            "stored_bytes": sum(v["stored_bytes"] or 0 for v in variants), "zarr_stored_ratio": zarr_ratio,
            "file_stored_ratio": own,
            "rates": {"rechunk": {k: rechunk[k] for k in ("mib_per_s", "s_per_chunk", "observations", "sources")},
                      "repack": repack, "zarr_compression": compression}}
