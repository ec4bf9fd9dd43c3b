"""More repetitions where an answer is not yet decided: which comparisons are undecided, which cases
run again (and as which repetitions), the plan fields that ask for it, and what the summary says."""

from __future__ import annotations

import io
import json

import pytest

from layoutlab.pipeline import plan as plans
from layoutlab.pipeline import repetitions
from layoutlab.pipeline.outcomes import summarize_dataset
from layoutlab.pipeline.payloads import BenchCase, CaseList, MoreRepetitionsInput, SummarizeInput
from layoutlab.pipeline.plan import PlanError

PLATFORM = "lambda-1769"
PATTERN = "beam-read"
# wall seconds of three repetitions per (variant, reader); the original's best reader is "aligned"
WALLS = {
    ("original", "aligned"): [1.00, 1.01, 0.99],
    ("original", "default"): [2.00, 2.10, 1.90],
    ("paged-8MiB", "aligned"): [0.50, 0.51, 0.49],  # clearly faster: decided
    ("kerchunk-original", "kerchunk-fsspec"): [1.00, 1.005, 0.995],  # the same within 10 %: decided
    ("zarr-a", "zarr-obstore"): [0.60, 1.00, 1.60],  # could be anything from 0.6x to 1.6x: undecided
}


def result(variant, reader, wall, repetition, platform=PLATFORM, pattern=PATTERN):
    return {"kind": "RESULT", "dataset": "d1", "variant": variant, "pattern": pattern, "reader": reader,
            "platform": platform, "repetition": repetition, "wall_s": wall, "status": "ok", "checksum_ok": True,
            "case_id": plans.case_id(variant, pattern, reader, platform, repetition)}


def results(walls=WALLS):
    return [result(v, r, w, i) for (v, r), ws in walls.items() for i, w in enumerate(ws)]


def first_round(walls=WALLS):
    formats = {"aligned": "hdf5", "default": "hdf5", "kerchunk-fsspec": "kerchunk", "zarr-obstore": "zarr"}
    return [{"case_id": plans.case_id(v, PATTERN, r, PLATFORM, rep), "dataset_id": "d1", "dataset": "d1",
             "variant": v, "format": formats[r], "target": f"s3://out/{v}", "pattern": PATTERN, "reader": r,
             "platform": PLATFORM, "platform_kind": "lambda", "repetition": rep, "params": {"beam": "gt1l"}}
            for rep in range(3) for (v, r) in walls]


SCHEDULE = plans.repetition_schedule({"repetitions": 3, "max_repetitions": 9})


def first_cases():
    return [BenchCase.from_event(c) for c in first_round()]


def test_only_a_comparison_whose_interval_reaches_beyond_the_resolution_is_undecided():
    found = {c["variant"]: c for c in repetitions.comparisons(results(), resolution=0.1)}
    assert set(found) == {"paged-8MiB", "kerchunk-original", "zarr-a"}  # each variant against the original
    assert found["paged-8MiB"]["decided"] and found["paged-8MiB"]["verdict"] == "faster"
    assert found["kerchunk-original"]["decided"] and found["kerchunk-original"]["verdict"] == "no measurable difference"
    assert not found["zarr-a"]["decided"] and found["zarr-a"]["verdict"] == "no measurable difference"
    # compared best reader against best reader
    assert found["zarr-a"]["original_reader"] == "aligned"
    # a coarser resolution accepts the wide interval as "no difference worth deciding"
    assert repetitions.undecided(results(), resolution=0.9) == []


def test_too_few_repetitions_are_undecided():
    two = {key: walls[:2] for key, walls in WALLS.items()}
    assert {c["variant"] for c in repetitions.undecided(results(two), 0.1)} == {"paged-8MiB", "kerchunk-original",
                                                                                 "zarr-a"}


def test_the_next_round_repeats_exactly_the_undecided_cases_and_the_originals_they_are_compared_with():
    open_now = repetitions.undecided(results(), 0.1)
    cases = repetitions.next_round_cases(first_cases(), open_now, results(), SCHEDULE, round_number=2)
    # every reader of both sides that may still be its side's best (which reader is best must not be decided
    # by unequal repetitions): not the original's "default", twice as slow as "aligned" every time;
    # repetitions are the outer loop, as in round 1; paged-8MiB and kerchunk-original are not repeated
    assert [(c.variant, c.reader, c.repetition) for c in cases] == [
        ("original", "aligned", 3), ("zarr-a", "zarr-obstore", 3),
        ("original", "aligned", 4), ("zarr-a", "zarr-obstore", 4),
        ("original", "aligned", 5), ("zarr-a", "zarr-obstore", 5)]
    assert cases[0].case_id == "original#beam-read#aligned#lambda-1769#003"
    assert cases[1].target == "s3://out/zarr-a" and cases[1].params == {"beam": "gt1l"}
    earlier = {c.case_id for c in first_cases()}
    third = repetitions.next_round_cases(first_cases(), open_now, results(), SCHEDULE, round_number=3)
    ids = [c.case_id for c in first_cases() + cases + third]
    assert len(ids) == len(set(ids)) and not earlier & {c.case_id for c in cases + third}
    assert {c.repetition for c in third} == {6, 7, 8}


def test_a_reader_whose_times_overlap_the_best_readers_runs_again_a_far_slower_one_not():
    close = {**WALLS, ("original", "default"): [1.05, 2.10, 1.90]}  # (its fastest within the best's spread)
    open_now = repetitions.undecided(results(close), 0.1)
    cases = repetitions.next_round_cases(first_cases(), open_now, results(close), SCHEDULE, round_number=2)
    assert ("original", "default") in {(c.variant, c.reader) for c in cases}
    far = {**WALLS, ("original", "default"): [55.0, 56.0, 54.0]}  # (h5coro's listing of ATL06 beside h5py's)
    cases = repetitions.next_round_cases(first_cases(), open_now, results(far), SCHEDULE, round_number=2)
    assert ("original", "default") not in {(c.variant, c.reader) for c in cases}


def test_a_reader_one_slow_run_put_behind_runs_again_until_it_has_the_repetitions_of_an_interval():
    # one repetition each (a plan with "repetitions": 1): "default" twice as slow once is not yet out of the race
    once = {key: walls[:1] for key, walls in WALLS.items()}
    open_now = repetitions.undecided(results(once), 0.1)
    cases = repetitions.next_round_cases(first_cases(), open_now, results(once), SCHEDULE, round_number=2)
    assert ("original", "default") in {(c.variant, c.reader) for c in cases}
    # with three times each its fastest (1.90) is beyond the best's slowest (1.01) by more than 10 %: out
    assert (PLATFORM, PATTERN, "original", "default") in repetitions.in_the_race(results(once), 0.1)
    assert (PLATFORM, PATTERN, "original", "default") not in repetitions.in_the_race(results(), 0.1)


def test_a_reader_that_failed_on_a_repeated_variant_is_not_run_again():
    records = [r for r in results() if not (r["variant"] == "original" and r["reader"] == "default")]
    open_now = repetitions.undecided(records, 0.1)
    cases = repetitions.next_round_cases(first_cases(), open_now, records, SCHEDULE, round_number=2)
    assert {(c.variant, c.reader) for c in cases} == {("original", "aligned"), ("zarr-a", "zarr-obstore")}


def test_rounds_never_run_a_case_beyond_max_repetitions():
    schedule = plans.repetition_schedule({"repetitions": 3, "max_repetitions": 8})
    assert schedule.max_rounds == 3
    assert [list(plans.round_repetitions(schedule, n)) for n in (1, 2, 3)] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    off = plans.repetition_schedule({"repetitions": 3})
    assert off.max_rounds == 1 and off.max == 3


class FakeS3:
    def __init__(self, objects):
        self.objects = dict(objects)

    def get_object(self, Bucket, Key):
        return {"Body": io.BytesIO(self.objects[(Bucket, Key)])}

    def put_object(self, Bucket, Key, Body, **_):
        self.objects[(Bucket, Key)] = Body


class FakeStore:
    def __init__(self, items):
        self.stored = list(items)
        self.run: dict = {}
        self.summary = None

    def items(self, dataset=None, kind=None):
        return [i for i in self.stored if kind is None or i["kind"] == kind]

    def update_run(self, dataset_id, **fields):
        self.run.update(fields)

    def put_summary(self, dataset_id, summary):
        self.summary = summary


def step(store, s3, cases, schedule=SCHEDULE):
    event = {"phase": "more_repetitions", "dataset_id": "d1", "cases": cases, "repetitions": schedule.to_event()}
    return repetitions.plan_more_repetitions(MoreRepetitionsInput.from_event(event), s3=s3, store=store,
                                             outputs_bucket="out").to_event()


def test_the_step_writes_the_next_rounds_list_and_counts_it_in_the_run():
    s3 = FakeS3({("out", "runs/d1/cases.json"): json.dumps(first_round()).encode()})
    store = FakeStore(results())
    cases = step(store, s3, {"key": "runs/d1/cases.json", "count": 15, "round": 1, "planned": 15})
    assert cases == {"key": "runs/d1/cases-round-2.json", "count": 6, "round": 2, "planned": 21, "undecided": 1}
    written = json.loads(s3.objects[("out", "runs/d1/cases-round-2.json")])
    assert {c["variant"] for c in written} == {"original", "zarr-a"}
    assert store.run == {"cases": 21, "rounds": 2}


def test_the_step_stops_when_all_is_decided_or_no_round_is_left():
    decided = {k: v for k, v in WALLS.items() if k[0] != "zarr-a"}
    s3 = FakeS3({("out", "runs/d1/cases.json"): json.dumps(first_round(decided)).encode()})
    current = {"key": "runs/d1/cases.json", "count": 12, "round": 1, "planned": 12}
    assert step(FakeStore(results(decided)), s3, current) == {"key": None, "count": 0, "round": 1, "planned": 12,
                                                              "undecided": 0}
    last = {"key": "runs/d1/cases-round-3.json", "count": 6, "round": 3, "planned": 27}
    stopped = step(FakeStore(results()), s3, last)
    assert stopped["count"] == 0 and stopped["round"] == 3 and stopped["undecided"] == 1


def test_the_summary_says_how_many_rounds_ran_and_what_stayed_undecided_at_the_cap():
    plan_state = {"cases": {"key": None, "count": 0, "round": 3, "planned": 27}, "repetitions": SCHEDULE.to_event()}
    s3 = FakeS3({})
    store = FakeStore(results())
    summarize_dataset(SummarizeInput.from_event({"dataset_id": "d1", "plan": plan_state}), s3=s3, store=store, outputs_bucket="out")
    rounds = store.summary["repetition_rounds"]
    assert rounds["rounds"] == 3 and rounds["stopped"] == "max_repetitions"
    assert [(c["variant"], c["pattern"]) for c in rounds["undecided"]] == [("zarr-a", PATTERN)]
    assert "3 rounds of repetitions" in rounds["text"]
    assert "still undecided at the cap of 9 repetitions: zarr-a vs original on beam-read (lambda-1769)" in rounds["text"]
    assert store.summary["cases_planned"] == 27  # every round's cases, not the last round's count


def test_a_plan_without_more_rounds_says_so():
    summary = repetitions.rounds_summary(CaseList(key=None, round=1, count=15, planned=15),
                                         plans.repetition_schedule({"repetitions": 3}), results())
    assert summary["rounds"] == 1 and summary["stopped"] == "more repetitions off"
    assert "max_repetitions would repeat these" in summary["text"]
    decided = {k: v for k, v in WALLS.items() if k[0] != "zarr-a"}
    assert repetitions.rounds_summary(CaseList(key=None, round=2, count=0, planned=0), SCHEDULE,
                                      results(decided))["text"].endswith("every comparison with the original is decided.")


@pytest.mark.parametrize("override, message", [
    ({"repetitions": 3, "max_repetitions": 2}, "'max_repetitions' must be an integer from 'repetitions' (3) to 100"),
    ({"repetitions": 3, "max_repetitions": 101}, "max_repetitions: 101 is greater than the maximum of 100"),
    ({"repetitions": 3, "max_repetitions": "9"}, "max_repetitions: '9' is not of type 'integer'"),
    ({"repetitions": 3, "max_repetitions": 9, "resolution": 1.5}, "resolution: 1.5 is greater than or equal to the maximum of 1"),
])
def test_bad_repetition_fields_are_refused_naming_the_plan_and_field(override, message):
    with pytest.raises(PlanError, match="plan 'default'") as caught:
        plans.merge_plan(override)
    assert message in str(caught.value)


def test_a_plan_naming_repetitions_only_gets_exactly_those():
    base = {**plans.default_plan(), "repetitions": 3, "max_repetitions": 9}
    assert plans.merge_plan({"repetitions": 20}, base)["repetitions"] == 20  # not refused for the base's cap
    assert plans.repetition_schedule(plans.merge_plan({"repetitions": 2}, base)).max_rounds == 1
    assert plans.repetition_schedule(plans.merge_plan({"name": "x"}, base)).max_rounds == 3
