"""The choice of the layout to keep on one platform, by rules read top to bottom, and the sentences that
say why (``decision.decide`` calls it with each platform's evidence).

A *candidate* comes first, by the selection rule that applies (the workload mix, else Nguyen et al.'s
balanced product, else the smallest worst slowdown); then each rule of ``RULES``, in order, may replace
the choice so far with one it names, and says why:

1. **dominated**: never a variant another one beats or matches on every axis of the Pareto front;
2. **measurably better**: a variant on the front the intervals say reads faster (by more than
   ``BETTER_BY_MORE_THAN``) on a pattern chosen on and no slower on any, as often as one is found;
3. **no better than the original**: the original, when the choice is measurably faster than it on none
   of the patterns it was chosen on (it needs no conversion and no extra storage);
4. **cheaper equivalent**: a variant on the front that reads as fast (``AS_FAST_WITHIN``), is measurably
   faster than the original on one of those patterns and costs less over the yardstick.

Every comparison is ``Comparison``: the ratio of two variants' median times and its bootstrap interval.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from layoutlab.report import budget, cost

ORIGINAL = "original"
# Bootstrap of the ratio of two medians: resamples, confidence, and the fewest repetitions of each
# side for an interval to mean anything (with fewer, the answer is "cannot tell").
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
MIN_REPETITIONS = 3


def ratio_interval(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float] | None:
    """The ``CONFIDENCE`` bootstrap interval of median(a) / median(b); None with fewer than
    ``MIN_REPETITIONS`` on either side (an interval from one or two runs would claim too much).
    Seeded: the same records always give the same interval."""
    if min(len(a), len(b)) < MIN_REPETITIONS:
        return None
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = np.median(xa[rng.integers(0, len(xa), (BOOTSTRAP_SAMPLES, len(xa)))], axis=1)
    mb = np.median(xb[rng.integers(0, len(xb), (BOOTSTRAP_SAMPLES, len(xb)))], axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ma / mb, [tail, 100 - tail])
    return float(low), float(high)


# -- comparisons --------------------------------------------------------------------------
# Two resolutions, set to the same 10 % today for two different reasons:
# "as fast" for a cheaper variant to replace the chosen one: measurably faster, or no measurable
# difference with a ratio of medians within 1 + this. An interval that straddles 1 around a ratio of 1.3
# (3 repetitions give 0.7..1.4) is undecided, not equal: letting it decide made two runs of the same
# demo recommend different layouts (measured: paged vs Icechunk-virtual at 1.07-1.34x flipped on it).
AS_FAST_WITHIN = 0.1
# "measurably better" for a rival to replace the chosen one: the whole interval below 1 / (1 + this). A
# "faster" at 0.97 is noise that three repetitions happened to separate (measured: it swapped
# Icechunk-virtual for kerchunk-over-paged in one demo run of four).
BETTER_BY_MORE_THAN = 0.1


@dataclass(frozen=True)
class Comparison:
    """One variant's repetitions against another's on one pattern: ratio of their medians, the interval of
    that ratio (None: too few repetitions) and the verdict the interval supports."""

    ratio: float
    interval: tuple[float, float] | None
    verdict: str
    repetitions: tuple[int, int]

    @classmethod
    def of(cls, a: list[float], b: list[float]) -> "Comparison":
        interval = ratio_interval(a, b)
        if interval is None:
            verdict = "too few repetitions to tell"
        elif interval[1] < 1:
            verdict = "faster"
        elif interval[0] > 1:
            verdict = "slower"
        else:
            verdict = "no measurable difference"
        return cls(statistics.median(a) / statistics.median(b), interval, verdict, (len(a), len(b)))

    @classmethod
    def from_dict(cls, c: dict) -> "Comparison":
        interval = tuple(c["interval"]) if c.get("interval") is not None else None
        return cls(c["ratio"], interval, c["verdict"], tuple(c.get("repetitions") or (0, 0)))

    def to_dict(self) -> dict:
        return {"ratio": self.ratio, "interval": list(self.interval) if self.interval else None,
                "verdict": self.verdict, "repetitions": list(self.repetitions)}

    @property
    def slower(self) -> bool:
        return self.verdict == "slower"

    @property
    def faster(self) -> bool:
        return self.verdict == "faster"

    def as_fast(self) -> bool:
        return self.faster or (self.verdict == "no measurable difference" and self.ratio <= 1 + AS_FAST_WITHIN)

    def better_beyond_resolution(self) -> bool:
        return self.faster and self.interval[1] < 1 / (1 + BETTER_BY_MORE_THAN)


def compare(a: list[float], b: list[float]) -> dict:
    """A against B: ratio of medians, its interval, and the verdict it supports (``Comparison``, as a dict)."""
    return Comparison.of(a, b).to_dict()


def as_fast(comparison: Comparison | dict) -> bool:
    """Reads as fast: measurably faster, or no measurable difference within ``AS_FAST_WITHIN``."""
    return (comparison if isinstance(comparison, Comparison) else Comparison.from_dict(comparison)).as_fast()


@dataclass(frozen=True)
class Evidence:
    """What the rules weigh on one platform: every variant's best-reader repetitions, the Pareto points,
    the costs, the mix and the cost yardstick."""

    platform: str
    best: dict[tuple, tuple[float, str]]  # (platform, pattern, variant) -> (median s, its best reader)
    walls: dict[tuple, list[float]]  # (platform, pattern, variant, reader) -> every repetition's s
    points: dict[str, dict]  # variant -> its Pareto point, in the front's order
    costs: dict[str, dict]  # variant -> cost.layout_costs row
    mix: dict[str, float] | None
    yardstick: dict

    def comparisons(self, variant: str, against: str, patterns) -> dict[str, Comparison]:
        """pattern -> ``variant``'s best-reader repetitions against ``against``'s, where both were measured."""
        out = {}
        for pattern in patterns:
            mine = self.best.get((self.platform, pattern, variant))
            theirs = self.best.get((self.platform, pattern, against))
            if mine and theirs:
                out[pattern] = Comparison.of(self.walls[(self.platform, pattern, variant, mine[1])],
                                             self.walls[(self.platform, pattern, against, theirs[1])])
        return out

    def rivals(self, variant: str) -> list[str]:
        """The variants on the Pareto front other than ``variant`` and the original, in the front's order."""
        return [other for other, point in self.points.items()
                if other not in (variant, ORIGINAL) and point["on_front"]]

    def cost(self, variant: str, patterns) -> float | None:
        return workload_cost(self.costs.get(variant), patterns, self.mix, self.yardstick)


def workload_cost(row: dict | None, patterns: list[str], mix: dict | None, yardstick: dict) -> float | None:
    """$ of conversion once + ``months`` of storage and of the S3 requests of ``reads_per_month`` reads
    (shared over ``patterns`` by the mix, else equally); None when a part is unknown."""
    if not row or row.get("conversion_usd") is None or row.get("storage_usd_per_month") is None:
        return None
    per_1000 = [row["requests_usd_per_1000"].get(p) for p in patterns]
    if not patterns or any(v is None for v in per_1000):
        return None
    shares = [mix[p] for p in patterns] if mix else [1 / len(patterns)] * len(patterns)
    requests = sum(share * v for share, v in zip(shares, per_1000)) * yardstick["reads_per_month"] / cost.ACCESSES
    return row["conversion_usd"] + yardstick["months"] * (row["storage_usd_per_month"] + requests)


# -- the choice --------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """The first pick, by the selection rule that applies: the variant, why, and the patterns it was chosen on."""

    variant: str
    reason: str
    on: tuple[str, ...]


@dataclass(frozen=True)
class Cheaper:
    """A variant that reads as fast as ``instead_of`` and costs less over the yardstick."""

    variant: str
    cost: float
    against_choice: dict[str, Comparison]
    against_original: dict[str, Comparison]
    instead_of: str
    instead_of_cost: float

    def to_dict(self) -> dict:
        return {"variant": self.variant, "cost": self.cost, "against_choice": _as_dicts(self.against_choice),
                "against_original": _as_dicts(self.against_original), "instead_of": self.instead_of,
                "instead_of_cost": self.instead_of_cost}


@dataclass(frozen=True)
class Choice:
    """The variant kept so far, the rule that kept it and the choice it replaced (None: the candidate)."""

    variant: str
    rule: str
    on: tuple[str, ...]
    replaced: "Choice | None" = None
    candidate: Candidate | None = None  # rule CANDIDATE: the pick
    axes: tuple[str, ...] = ()  # rule DOMINATED: the axes compared
    against_original: dict[str, Comparison] | None = None  # rule NO_BETTER: the replaced variant's comparisons
    cheaper: Cheaper | None = None  # rule CHEAPER

    def first(self, rule: str) -> "Choice | None":
        """The earliest choice of the chain made by ``rule``."""
        found, step = None, self
        while step is not None:
            found = step if step.rule == rule else found
            step = step.replaced
        return found


CANDIDATE, DOMINATED, MEASURABLY_BETTER, NO_BETTER, CHEAPER = (
    "candidate", "dominated", "measurably better", "no better than the original", "cheaper equivalent")


def candidate(result: dict, mix: dict | None) -> Candidate | None:
    """The first pick, by the rule that applies: mix, balanced, worst slowdown."""
    if mix and result.get("mix_choice"):
        choice = result["mix_choice"]
        shares = ", ".join(f"{p} {share:.0%}" for p, share in mix.items())
        return Candidate(choice["variant"], f"it is fastest for the workload ({shares}) at "
                                            f"{choice['mix_wall_s']:.3f} s per access on average", tuple(mix))
    if result.get("balanced_product"):
        b = result["balanced_product"]
        return Candidate(b["variant"], f"it balances time series ({b['timeseries_wall_s']:.3f} s) and maps "
                                       f"({b['map_wall_s']:.3f} s) best (smallest product, as Nguyen et al. choose)",
                         tuple(b["patterns"]))
    if result.get("min_worst_slowdown"):
        w = result["min_worst_slowdown"]
        return Candidate(w["variant"], f"it is never more than {w['worst_slowdown']:.1f}x slower than the best "
                                       "variant of any pattern", tuple(sorted(result["patterns"])))
    return None


# The rules, in order: each takes the evidence and the choice so far and returns the choice that replaces
# it, or None to keep it.
def replace_dominated(evidence: Evidence, choice: Choice) -> Choice | None:
    """Never a dominated variant: the fastest of those at least as good on every axis that are on the front.
    (Dominance is transitive, so one of the dominating variants is on the front, and the one taken is not
    dominated.)"""
    point = evidence.points.get(choice.variant)
    if point is None or not point["dominated_by"]:
        return None
    better = [evidence.points[v] for v in point["dominated_by"]]
    on_front = [p for p in better if p["on_front"]] or better
    fastest = min(on_front, key=lambda p: (p["read_s"], p["variant"]))["variant"]
    return Choice(fastest, DOMINATED, choice.on, replaced=choice, axes=tuple(point["axes"]))


def measurably_better(evidence: Evidence, variant: str, on) -> str | None:
    """A variant on the Pareto front that reads measurably faster than ``variant`` (by more than
    ``BETTER_BY_MORE_THAN``) on some pattern of ``on`` and not measurably slower on any (the one faster on
    most patterns, then by name): the candidate rules work on medians, so two close variants can swap
    between runs; this turns to the one the intervals say is better."""
    found = []
    for other in evidence.rivals(variant):
        against = evidence.comparisons(other, variant, on)
        if len(against) < len(on) or any(c.slower or c.interval is None for c in against.values()):
            continue
        faster = sum(c.better_beyond_resolution() for c in against.values())
        if faster:
            found.append((-faster, other))
    return min(found)[1] if found else None


def replace_by_measurably_better(evidence: Evidence, choice: Choice) -> Choice | None:
    """Follow measurably better variants, one after the other, until none is or one comes back."""
    seen, better = {choice.variant}, choice
    while better.variant != ORIGINAL:
        found = measurably_better(evidence, better.variant, choice.on)
        if found is None or found in seen:
            break
        seen.add(found)
        better = Choice(found, MEASURABLY_BETTER, choice.on, replaced=better)
    return better if better is not choice else None


def keep_original_unless_faster(evidence: Evidence, choice: Choice) -> Choice | None:
    """The original when the choice is measured against it and is measurably faster on none of the patterns
    it was chosen on: the original needs no conversion and no extra storage."""
    if choice.variant == ORIGINAL:
        return None
    comparison = evidence.comparisons(choice.variant, ORIGINAL, choice.on)
    if not comparison or any(c.faster for c in comparison.values()):
        return None
    return Choice(ORIGINAL, NO_BETTER, choice.on, replaced=choice, against_original=comparison)


def cheaper_equivalent(evidence: Evidence, variant: str, on) -> Cheaper | None:
    """The cheapest variant that reads no measurably slower than ``variant`` on every pattern of ``on``,
    measurably faster than the original on one of them, on the Pareto front, and cheaper
    (``workload_cost``); None when there is none or the costs are unknown."""
    mine = evidence.cost(variant, on)
    if mine is None:
        return None
    found = None
    for other in evidence.rivals(variant):
        theirs = evidence.cost(other, on)
        if theirs is None or theirs >= mine or (found and theirs >= found.cost):
            continue
        against_choice = evidence.comparisons(other, variant, on)
        if len(against_choice) < len(on) or not all(c.as_fast() for c in against_choice.values()):
            continue
        against_original = evidence.comparisons(other, ORIGINAL, on)
        if not any(c.faster for c in against_original.values()):
            continue
        found = Cheaper(other, theirs, against_choice, against_original, variant, mine)
    return found


def replace_by_cheaper(evidence: Evidence, choice: Choice) -> Choice | None:
    """A variant that reads as fast as the choice and costs less (a virtual variant that reads as fast as a
    copy wins on cost)."""
    if choice.variant == ORIGINAL:
        return None
    cheaper = cheaper_equivalent(evidence, choice.variant, choice.on)
    return Choice(cheaper.variant, CHEAPER, choice.on, replaced=choice, cheaper=cheaper) if cheaper else None


RULES = (
    (DOMINATED, replace_dominated),
    (MEASURABLY_BETTER, replace_by_measurably_better),
    (NO_BETTER, keep_original_unless_faster),
    (CHEAPER, replace_by_cheaper),
)


def choose(evidence: Evidence, first: Candidate) -> Choice:
    """The candidate, then each rule of ``RULES`` in order on what the one before kept."""
    choice = Choice(first.variant, CANDIDATE, first.on, candidate=first)
    for _, rule in RULES:
        choice = rule(evidence, choice) or choice
    return choice


def unseparated(evidence: Evidence, variant: str, on) -> dict[str, dict[str, Comparison]]:
    """Variants on the Pareto front the evidence cannot tell from ``variant`` on the patterns of ``on``, measured
    on all of them: measurably slower than ``variant`` on none, or a trade-off the evidence does not settle
    (``_unsettled_trade_off``). The choice between them is not a finding; a run with more repetitions may
    name another (variant -> its comparisons with ``variant``)."""
    rivals = {}
    for other in evidence.rivals(variant):
        against = evidence.comparisons(other, variant, on)
        if len(against) == len(on) and (not any(c.slower for c in against.values())
                                        or _unsettled_trade_off(against)):
            rivals[other] = against
    return rivals


def _unsettled_trade_off(against: dict[str, Comparison]) -> bool:
    """A rival measurably faster than the kept variant on some pattern and measurably slower on another: which
    to keep rests on how much slower each is where it loses (the worst-case slowdown, or the mix). Settled only
    when the rival's largest slowdown is measurably above the kept variant's (the lower end of its interval
    over the upper end of the other's); otherwise another run can weigh them the other way (the ATL03-like
    demo granule: paged-auto fastest for beam-read, icechunk-virtual for open + list, kept in turn)."""
    slower = [c for c in against.values() if c.slower]
    faster = [c for c in against.values() if c.faster]
    if not slower or not faster:
        return False
    rival_worst_low = max(c.interval[0] for c in slower)  # the rival's slowdown, at least
    kept_worst_high = max(1 / c.interval[0] for c in faster)  # the kept variant's slowdown, at most
    return rival_worst_low <= kept_worst_high


def _as_dicts(comparisons: dict[str, Comparison]) -> dict[str, dict]:
    return {pattern: c.to_dict() for pattern, c in comparisons.items()}


def choice_record(evidence: Evidence, choice: Choice) -> dict:
    """The choice as the SUMMARY item and the report keep it (``result["choice"]``)."""
    on = list(choice.on)
    if choice.rule == NO_BETTER:
        kept_instead = choice.replaced.variant
        return {"variant": ORIGINAL, "why": why(choice), "candidate": kept_instead,
                "comparison": _as_dicts(choice.against_original), "no_measurable_difference": True,
                "cost": {"candidate": evidence.costs.get(kept_instead), "original": evidence.costs.get(ORIGINAL)},
                "on": on}
    comparison = evidence.comparisons(choice.variant, ORIGINAL, on) if choice.variant != ORIGINAL else {}
    dominated = choice.first(DOMINATED)
    return {"variant": choice.variant, "why": why(choice), "candidate": choice.variant,
            "comparison": _as_dicts(comparison), "no_measurable_difference": False,
            "replaced_dominated": dominated.replaced.variant if dominated else None, "on": on,
            "cheaper_than": choice.cheaper.to_dict() if choice.cheaper else None,
            "cost": {"kept": evidence.costs.get(choice.variant)}, "yardstick": evidence.yardstick,
            "unseparated": {other: _as_dicts(c) for other, c in unseparated(evidence, choice.variant, on).items()}}


# -- sentences ---------------------------------------------------------------------
def why(choice: Choice) -> str:
    """Why the choice was kept: the rule that kept it, over why the one it replaced was chosen first."""
    if choice.rule == CANDIDATE:
        return choice.candidate.reason
    if choice.rule == NO_BETTER:
        return ("no variant reads measurably faster than the original on the patterns it was chosen for, and the "
                "original needs no conversion and no extra storage")
    before, first = choice.replaced.variant, why(choice.replaced)
    if choice.rule == DOMINATED:
        return (f"{before} was chosen first ({first}), but {choice.variant} is at least as good on every axis of "
                f"{', '.join(choice.axes)}")
    if choice.rule == MEASURABLY_BETTER:
        return f"it reads measurably faster than {before} (chosen first: {first}) and no slower"
    return f"it reads as fast as {before} (chosen first: {first}) and costs less"


def usd(value: float | None) -> str:
    """Dollars to two significant digits, never in e-notation: $0.000078, $0.0036, $0.51, $12.40."""
    if value is None:
        return "$?"
    if value == 0:
        return "$0"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    return f"${value:.{max(2, 1 - math.floor(math.log10(abs(value))))}f}"


def interval_text(c: dict, whose: str) -> str:
    if c["interval"] is None:
        return (f"{c['ratio']:.2f}x {whose} time ({c['verdict']}: {min(c['repetitions'])} repetition(s), "
                f"{MIN_REPETITIONS} needed)")
    low, high = c["interval"]
    return f"{c['ratio']:.2f}x {whose} time (95% interval {low:.2f}-{high:.2f}: {c['verdict']})"


def _comparison_text(comparison: dict, whose: str = "the original's") -> str:
    return "; ".join(f"{pattern} {interval_text(c, whose)}" for pattern, c in comparison.items())


def _original_kept_cost_text(choice: dict) -> str:
    """What keeping the original saves: the candidate's conversion $ and its storage $ beyond the original's."""
    row = (choice.get("cost") or {}).get("candidate")
    original = (choice.get("cost") or {}).get("original") or {}
    if not row or row.get("conversion_usd") is None:
        return ""
    extra = None
    if row.get("storage_usd_per_month") is not None and original.get("storage_usd_per_month") is not None:
        extra = row["storage_usd_per_month"] - original["storage_usd_per_month"]
    store = "" if extra is None else (f" and {usd(extra)} a month more in S3" if extra > 0 else
                                      f" ({usd(-extra)} a month less in S3)")
    return f"; making {choice['candidate']} would cost {usd(row['conversion_usd'])} once{store}"


def _cheaper_text(result: dict, choice: dict) -> str:
    """Against the variant the cheaper one replaced: the comparisons, then what each costs over the yardstick."""
    cheaper = choice["cheaper_than"]
    variant, first = choice["variant"], cheaper["instead_of"]
    costs = result.get("costs") or {}
    mine, theirs = costs.get(variant) or {}, costs.get(first) or {}
    yardstick = choice["yardstick"]
    requests = ", ".join(
        f"{p} {usd(mine['requests_usd_per_1000'].get(p))} vs {usd(theirs['requests_usd_per_1000'].get(p))}"
        for p in choice["on"])
    whose = f"{first}'s"
    return (f". Against {first}: {_comparison_text(cheaper['against_choice'], whose)}. "
            f"Cost, {variant} vs {first}: {usd(mine.get('conversion_usd'))} vs "
            f"{usd(theirs.get('conversion_usd'))} to convert, {usd(mine.get('storage_usd_per_month'))} vs "
            f"{usd(theirs.get('storage_usd_per_month'))} a month in S3, S3 requests per 1,000 reads "
            f"{requests}: {usd(cheaper['cost'])} vs {usd(cheaper['instead_of_cost'])} over "
            f"{yardstick['months']} months at {yardstick['reads_per_month']:,} reads a month")


def recommendation_sentence(platform: str, result: dict, mix: dict | None, budgets: list[dict] | None = None) -> str:
    """The recommendation in one plain sentence (it may run to a few clauses; never a line break)."""
    choice = result.get("choice")
    if choice is None:
        return f"On {platform} no variant was measured on every pattern: nothing to recommend."
    measured_against = _comparison_text(choice["comparison"])
    if choice["no_measurable_difference"]:
        return (f"On {platform}, keep the original: {choice['why']} ({choice['candidate']}: "
                f"{measured_against}{_original_kept_cost_text(choice)}).")
    variant = choice["variant"]
    wins = [p for p, e in result["patterns"].items() if e["best_variant"] == variant]
    tail = f"; it is the fastest for {', '.join(wins)}" if wins else ""
    if choice.get("cheaper_than"):
        tail += _cheaper_text(result, choice)
    against = f" Against the original: {measured_against}." if measured_against else ""
    over = next((b for b in budgets or [] if b["variant"] == variant and b["within_budget"] is False), None)
    flag = f" Size budget: {variant} adds {budget.budget_text(over)}." if over else ""
    return f"On {platform}, keep {variant}: {choice['why']}{tail}.{against}{flag}{_unseparated_text(choice)}"


def _unseparated_text(choice: dict) -> str:
    """Says so when the evidence cannot separate the kept variant from others, and what would."""
    rivals = choice.get("unseparated") or {}
    if not rivals:
        return ""
    variant = choice["variant"]
    whose = f"{variant}'s"
    listed = "; ".join(f"{other} ({_comparison_text(c, whose)})" for other, c in sorted(rivals.items()))
    return (f" The evidence cannot separate {variant} from {', '.join(sorted(rivals))} on {', '.join(choice['on'])}: "
            f"{listed}. More repetitions of these variants' cases on those patterns (the plan's max_repetitions) "
            f"would tell whether one reads faster; until then another run may keep any of them.")
