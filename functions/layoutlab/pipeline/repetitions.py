"""More repetitions where an answer is not yet decided.

After a round of benchmark cases, every variant is compared with the original on
each pattern and platform, best reader against best reader, as
``report.decision.compare`` does: the ratio of their median times and its 95 %
bootstrap interval. A comparison is *decided* when the interval lies wholly below
or above 1 (faster, slower), or straddles 1 but within the plan's ``resolution``
(between 1/(1+r) and 1+r: any difference is smaller than is worth telling apart,
so "no measurable difference" is the answer). It is *undecided* when the interval
straddles 1 and reaches beyond the resolution, or when either side has too few
repetitions for an interval at all.

While the plan's schedule (``plan.repetition_schedule``) allows another round,
the cases of exactly the undecided comparisons run again: the variant's on that
pattern and platform, and the original's it is compared against, with every
reader each was read with successfully (a reader that failed there is not run
again: it has nothing to add to the comparison) — which reader is best is itself a median of the
repetitions, and one reader given more repetitions than another would make that
choice (and the comparison after it) swing from round to round. But a reader out of
that race is not run again either: one whose fastest time is slower than the best
reader's slowest by more than the resolution (ICESat-2 ATL06's open-list: h5coro's
55 s and xarray's 35 s beside h5py's 1.5 s; 1,000 of a 2,000-s study went to such
repetitions, which no round could make the best). Repetition
indexes continue where the last round stopped, so every RESULT key stays unique.
"""

from __future__ import annotations

import json

from layoutlab.pipeline import plan as plans
from layoutlab.pipeline.payloads import BenchCase, CaseList, MoreRepetitionsInput, Schedule
from layoutlab.report import decision


def decided(comparison: dict, resolution: float) -> bool:
    """``comparison`` is ``decision.compare``'s answer; see the module docstring."""
    interval = comparison.get("interval")
    if interval is None:
        return False
    low, high = interval
    if high < 1 or low > 1:
        return True
    return low >= 1 / (1 + resolution) and high <= 1 + resolution


def comparisons(records: list[dict], resolution: float) -> list[dict]:
    """Each variant against the original, per platform and pattern, best reader against best reader."""
    walls = decision.walls_by_key(records)
    best = decision.best_readers(decision.median_times(records))
    found = []
    for (platform, pattern, variant), (_, reader) in sorted(best.items()):
        original = best.get((platform, pattern, decision.ORIGINAL))
        if variant == decision.ORIGINAL or original is None:
            continue
        compared = decision.compare(walls[(platform, pattern, variant, reader)],
                                    walls[(platform, pattern, decision.ORIGINAL, original[1])])
        found.append({"platform": platform, "pattern": pattern, "variant": variant, "reader": reader,
                      "original_reader": original[1], **compared, "decided": decided(compared, resolution)})
    return found


def undecided(records: list[dict], resolution: float) -> list[dict]:
    return [c for c in comparisons(records, resolution) if not c["decided"]]


def in_the_race(records: list[dict], resolution: float) -> set[tuple]:
    """The (platform, pattern, variant, reader) whose reader may still be the best of its variant there: its
    fastest time is no slower than the best reader's slowest time, give or take ``resolution`` (the best reader
    as the comparisons choose it: ``decision.best_readers`` of the medians). A reader leaves the race only
    when it and the best reader each have ``decision.MIN_REPETITIONS`` times: one or two times show no spread,
    and a reader one slow run put behind would never get the repetitions that could bring it back."""
    walls = decision.walls_by_key(records)
    best = decision.best_readers(decision.median_times(records))
    racing = set()
    for (platform, pattern, variant, reader), values in walls.items():
        _, leader = best[(platform, pattern, variant)]
        leading = walls[(platform, pattern, variant, leader)]
        too_few = min(len(values), len(leading)) < decision.MIN_REPETITIONS
        if too_few or min(values) <= max(leading) * (1 + resolution):
            racing.add((platform, pattern, variant, reader))
    return racing


def cases_to_repeat(first_round: list[BenchCase], open_comparisons: list[dict], records: list[dict],
                    resolution: float = 0.0) -> list[BenchCase]:
    """The cases of the first round (repetition 0) behind ``open_comparisons``, every reader of both
    sides that ``records`` hold a good result of and that may still be its side's best, in the round's order."""
    measured = in_the_race(records, resolution)  # (platform, pattern, variant, reader)
    wanted = set()
    for c in open_comparisons:
        wanted.add((c["variant"], c["pattern"], c["platform"]))
        wanted.add((decision.ORIGINAL, c["pattern"], c["platform"]))
    chosen, seen = [], set()
    for case in first_round:
        key = (case.variant, case.pattern, case.reader, case.platform)
        if ((case.variant, case.pattern, case.platform) in wanted and key not in seen
                and (case.platform, case.pattern, case.variant, case.reader) in measured):
            seen.add(key)
            chosen.append(case)
    return chosen


def next_round_cases(first_round: list[BenchCase], open_comparisons: list[dict], records: list[dict],
                     schedule: Schedule, round_number: int) -> list[BenchCase]:
    """Round ``round_number``'s cases: repetitions are the outer loop, as in the first round."""
    templates = cases_to_repeat(first_round, open_comparisons, records, schedule.resolution)
    return [plans.repeat_case(case, repetition)
            for repetition in plans.round_repetitions(schedule, round_number) for case in templates]


def describe(comparison: dict) -> str:
    where = f"{comparison['variant']} vs original on {comparison['pattern']} ({comparison['platform']})"
    if comparison["interval"] is None:
        return (f"{where}: {comparison['ratio']:.2f}x from {min(comparison['repetitions'])} repetition(s), "
                f"{decision.MIN_REPETITIONS} needed for an interval")
    low, high = comparison["interval"]
    return f"{where}: {comparison['ratio']:.2f}x, 95% interval {low:.2f}-{high:.2f}"


def brief(comparison: dict) -> dict:
    """What the state and the summary keep of a comparison (small: the state is limited to 256 KiB)."""
    return {k: comparison[k] for k in ("platform", "pattern", "variant", "reader", "original_reader", "ratio",
                                       "interval", "repetitions")}


def plan_more_repetitions(step: MoreRepetitionsInput, *, s3, store, outputs_bucket: str) -> CaseList:
    """The state machine's ``PlanMoreRepetitions`` step: the next round's case list, or none.

    ``step``: ``dataset_id``, ``cases`` (the round just run) and ``repetitions`` (the plan's schedule).
    Returns the next ``cases``; ``count`` 0 (``key`` None) when nothing is left undecided or the
    schedule has no round left.
    """
    current, schedule = step.cases, step.repetitions
    results = store.items(dataset=step.dataset_id, kind="RESULT")
    still_open = undecided(results, schedule.resolution)
    round_number = current.round + 1
    done = CaseList(key=None, count=0, round=current.round, planned=current.planned, undecided=len(still_open))
    if not still_open or round_number > schedule.max_rounds:
        return done
    run_prefix = f"runs/{step.dataset_id}/"
    body = s3.get_object(Bucket=outputs_bucket, Key=run_prefix + "cases.json")["Body"].read()
    first_round = [case for case in map(BenchCase.from_event, json.loads(body)) if case.repetition == 0]
    cases = next_round_cases(first_round, still_open, results, schedule, round_number)
    if not cases:
        return done
    key = f"{run_prefix}cases-round-{round_number}.json"
    s3.put_object(Bucket=outputs_bucket, Key=key, Body=json.dumps([c.to_event() for c in cases]).encode(),
                  ContentType="application/json")
    planned = current.planned + len(cases)
    store.update_run(step.dataset_id, cases=planned, rounds=round_number)
    return CaseList(key=key, count=len(cases), round=round_number, planned=planned, undecided=len(still_open))


def rounds_summary(cases: CaseList | None, schedule: Schedule | None, results: list[dict]) -> dict:
    """For the SUMMARY: how many rounds ran, and which comparisons are undecided after the last.

    ``cases`` and ``schedule`` are the execution's ``$.plan.cases`` (the last round's) and
    ``$.plan.repetitions``; a state without a schedule (an older execution) counts as one round.
    """
    resolution = schedule.resolution if schedule else plans.DEFAULT_RESOLUTION
    rounds = cases.round if cases else 1
    open_now = undecided(results, resolution)
    adaptive = schedule is not None and schedule.max > schedule.first
    if not open_now:
        stopped = "all decided"
    elif not adaptive:
        stopped = "more repetitions off"
    elif rounds >= schedule.max_rounds:
        stopped = "max_repetitions"
    else:
        stopped = "no round left"
    summary = {"rounds": rounds, "max_rounds": schedule.max_rounds if schedule else 1,
               "repetitions": schedule.first if schedule else None,
               "max_repetitions": schedule.max if schedule else None,
               "resolution": resolution, "undecided": [brief(c) for c in open_now][:50], "stopped": stopped}
    summary["text"] = rounds_text(summary, open_now)
    return summary


def rounds_text(summary: dict, open_now: list[dict]) -> str:
    rounds = summary["rounds"]
    ran = f"{rounds} round{'s' if rounds != 1 else ''} of repetitions"
    if summary["stopped"] != "more repetitions off" and (summary["max_repetitions"] or 0) > (summary["repetitions"] or 0):
        ran += (f" ({summary['repetitions']} per case, up to {summary['max_repetitions']} where a comparison "
                f"with the original was undecided at a resolution of {summary['resolution']:.0%})")
    if not open_now:
        return f"{ran}; every comparison with the original is decided."
    cap = {"max_repetitions": f" at the cap of {summary['max_repetitions']} repetitions",
           "more repetitions off": " (the plan's max_repetitions would repeat these)"}.get(summary["stopped"], "")
    listed = "; ".join(describe(c) for c in open_now[:10])
    more = f"; and {len(open_now) - 10} more" if len(open_now) > 10 else ""
    return f"{ran}; still undecided{cap}: {listed}{more}."
