"""The first round's cases of the variants that were made (the state machine's ``KeepCasesOfMadeVariants``).

The plan step writes the case list before any conversion runs, so it holds cases of variants that are then not
made: paging "auto" that cannot help a small file (SKIPPED), or a conversion that refused it (FAILURE), and the
references planned over them. Each such case still cost a bench invocation that measured nothing: a Lambda start,
or a whole Fargate task in AWS; 0.5-0.7 s each in the local run, where a third of a small product's first round
(GPM DPR: 432 of 1,134 cases) read variants that were never written. After the variants are converted and
published, this step writes the list without them and says on the RUN item which variants' cases were left out
and why. Later rounds are planned from results, so they never had such cases.
"""

from __future__ import annotations

import json

from layoutlab.pipeline.benchcase import variant_not_made
from layoutlab.pipeline.payloads import CaseList, MadeVariantsInput


def keep_cases_of_made_variants(step: MadeVariantsInput, *, s3, store, outputs_bucket: str) -> CaseList:
    """``step.cases`` (the plan's first round), or a list without the cases of variants not made (a new key)."""
    current = step.cases
    if not current.key or not current.count:
        return current
    cases = json.loads(s3.get_object(Bucket=outputs_bucket, Key=current.key)["Body"].read())
    not_made = {name: why for name in sorted({c["variant"] for c in cases})
                if (why := variant_not_made(step.dataset_id, name, store))}
    if not not_made:
        return current
    kept = [c for c in cases if c["variant"] not in not_made]
    key = f"runs/{step.dataset_id}/cases-of-made-variants.json"
    s3.put_object(Bucket=outputs_bucket, Key=key, Body=json.dumps(kept).encode(), ContentType="application/json")
    left_out = [{"variant": name, "cases": sum(1 for c in cases if c["variant"] == name), "why": why}
                for name, why in not_made.items()]
    planned = current.planned - (len(cases) - len(kept))
    store.update_run(step.dataset_id, cases=planned, cases_left_out=left_out)
    return CaseList(key=key, count=len(kept), round=current.round, planned=planned, undecided=current.undecided)
