"""Compare a candidate with a baseline under the rules: one verdict per watched key."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from profinfer_perfetto.check.baseline import (
    STALLED_KEY,
    STEP_KEY,
    WINDOW_KEY,
    Baseline,
    describe,
    shown,
)
from profinfer_perfetto.check.graph import GraphDiff
from profinfer_perfetto.check.paired import (
    odd_pair,
    pair_change,
    pair_mean_change,
    pair_spread,
    pairs_agree_past,
    without_pair,
)
from profinfer_perfetto.check.rules import Rule, Settings, percent
from profinfer_perfetto.check.stats import (
    Change,
    Spread,
    common_spread,
    mean_change,
    mean_noise,
    median_change,
    run_noise,
    run_spread,
)
from profinfer_perfetto.errors import ProfinferError

REGRESSION = "regression"
IMPROVEMENT = "improvement"
OK = "ok"
WITHIN_NOISE = "within the baseline's noise"
"""Past the limit, but no further than one more run of the baseline may stray (stats.run_noise)."""
UNDECIDED = "too few samples"
MISSING = "missing"


@dataclass(frozen=True)
class Verdict:
    rule: Rule
    key: str
    verdict: str
    base_n: int
    new_n: int
    change: Change | None = None
    confidence: str = "95%"
    noise: float | None = None
    """How far one more baseline run's statistic may stray (None: a one-run baseline)."""

    @property
    def failed(self) -> bool:
        return self.verdict == REGRESSION

    def sentence(self) -> str:
        c = self.change
        if c is None:
            return f"{self.key}: {self.verdict} (baseline {self.base_n} samples, " \
                   f"candidate {self.new_n})"
        noise = "" if self.noise is None else f", runs stray ±{self.noise:.1%}"
        how = (f"{c.change:+.1%} of a step" if self.rule.by_mean else
               f"{c.change:+.1%}, {self.confidence} CI {c.low:+.1%} .. {c.high:+.1%}")
        return (f"{self.key}: {self.rule.statistic} {shown(self.key, c.base)} -> "
                f"{shown(self.key, c.new)} ({how}; "
                f"limit {percent(self.rule.max_change)}{noise}): {self.verdict}")


@dataclass
class CheckResult:
    verdicts: list[Verdict]
    warnings: list[str] = field(default_factory=list)
    graph: GraphDiff | None = None
    """The candidate's graph against the baseline's (None: not looked at)."""

    @property
    def failed(self) -> bool:
        return any(v.failed for v in self.verdicts)


def _watched(rule: Rule, base: Baseline) -> list[str]:
    keys = [k for k in base.samples if fnmatchcase(k, rule.keys)]
    if rule.top:
        keys = sorted(keys, key=lambda k: (-base.share_of(k), k))[: rule.top]
    return sorted(keys)


def _judge(rule: Rule, change: Change, noise: float | None) -> str:
    """A regression (or improvement) is a change whose whole interval is past the limit, by at
    least min_abs_ns, and whose median lies further than the baseline's own runs' medians stray
    from each other (the band is one more run's median: it holds the within-run noise already,
    so the median, not the interval's far end, is what is held against it)."""
    sign = 1 if rule.direction == "increase" else -1
    worse = change.low if sign > 0 else -change.high
    better = -change.high if sign > 0 else change.low
    big_enough = abs(change.new - change.base) >= rule.min_abs_ns
    for past, moved, verdict in ((worse, sign * change.change, REGRESSION),
                                 (better, -sign * change.change, IMPROVEMENT)):
        if past > rule.max_change and big_enough:
            return WITHIN_NOISE if noise is not None and moved <= noise else verdict
    return OK


def _step_scale(base: Baseline, key: str) -> float:
    """What a mean of the key is judged as a part of: its phase's mean step time."""
    steps = [s for run in base.samples.get(f"{STEP_KEY}/{key.split('/')[1]}", []) for s in run]
    return float(sum(steps) / len(steps)) if steps else 0.0


def _none_judged(verdicts: list[Verdict], base: Baseline, settings: Settings) -> str:
    """Why a check could judge no key, in one sentence."""
    if not verdicts:
        return (f"no key could be judged: no rule matches a key of the baseline "
                f"({describe(base.made_from)})")
    missing = sum(v.verdict == MISSING for v in verdicts)
    return (f"no key could be judged: of the {len(verdicts)} keys the rules watch, {missing} "
            f"are missing from the candidate and {len(verdicts) - missing} have fewer than "
            f"{settings.min_samples} samples on a side (baseline: {describe(base.made_from)})")


def _setup_warnings(base: Baseline, new: Baseline) -> list[str]:
    """What the candidate was made from that differs from the baseline's; a one-run baseline."""
    warnings = [f"the candidate's {what} ({new.made_from.get(what, '') or 'unknown'}) differs "
                f"from the baseline's ({value or 'unknown'})"
                for what, value in base.made_from.items()
                if new.made_from.get(what, "") != value and what != "tool"]
    if base.made_from.get("tool") != new.made_from.get("tool"):
        warnings.append(f"baseline made by {base.made_from.get('tool')}, candidate by "
                        f"{new.made_from.get('tool')}")
    if base.runs == 1:
        warnings.append(
            "the baseline is one run: the interval knows within-run noise only; a baseline of "
            "several runs (query 'runs/*.pftrace' --save-baseline) also knows how runs differ")
    return warnings


def _pair_priors(watched: dict[Rule, list[str]], base: Baseline, new: Baseline,
                 dof: float) -> dict[Rule, Spread | None]:
    """Per rule, the spread of pairs common to its keys (stats.common_spread): the keys of one
    rule (ops against their op's other nodes) stray alike from pair to pair, the keys of
    different rules do not (a step's median strays ten times as far as an op's rel here)."""
    priors: dict[Rule, Spread | None] = {}
    for rule, keys in watched.items():
        spreads = [pair_spread(base.samples[k], new.samples.get(k, [])) for k in keys]
        priors[rule] = common_spread([s for s in spreads if s is not None], dof)
    return priors


def _change(rule: Rule, base: list[list[int]], new: list[list[int]], scale: float | None,
            settings: Settings, pair_priors: dict[Rule, Spread | None] | None) -> Change:
    """A key's change by its rule's statistic (`scale`: a by-mean key's step scale, None for
    the others); paired where there are `pair_priors` (the rules' common spreads of pairs)."""
    if rule.by_mean:
        assert scale is not None, "every by-mean key has its step scale"
        return (mean_change(base, new, scale) if pair_priors is None else
                pair_mean_change(base, new, scale))
    if pair_priors is None:
        return median_change(base, new, settings.confidence, settings.resamples)
    return pair_change(base, new, settings.confidence, settings.resamples, pair_priors[rule])


def _steady_pairs(base: Baseline, new: Baseline
                  ) -> tuple[tuple[Baseline, Baseline], list[str]]:
    """The pairs a paired check judges its medians on: all but an odd one (paired.odd_pair),
    and the warning that names it."""
    odd = odd_pair(base, new)
    if odd is None:
        return (base, new), []
    pair, off = odd
    return (without_pair(base, pair), without_pair(new, pair)), [
        f"pair {pair + 1} of {base.runs} (each side's run {pair + 1} by name) is left out of the "
        f"medians' judgement: its ops' times against each other lie {off:.1%} from the other "
        "pairs', as where the machine's speed changed between its two runs (docs/ab.md)"]


def _unsched_warning(result: CheckResult, base: Baseline, new: Baseline) -> None:
    """Where the step or window regressed in runs without --sched, what --sched would tell."""
    slower = sorted({v.key for v in result.verdicts if v.failed and
                     v.key.split("/")[0] in (STEP_KEY, WINDOW_KEY)})
    if slower and not any(k.split("/")[0] == STALLED_KEY for k in (*base.samples, *new.samples)):
        result.warnings.append(
            f"{', '.join(slower)} regressed in runs recorded without --sched, which cannot tell "
            "a busy machine from slower code: record both with --sched (the time stalled "
            "waiting for a CPU is then judged too)")


def compare(base: Baseline, new: Baseline, rules: tuple[Rule, ...],
            settings: Settings, paired: bool = False) -> CheckResult:
    """Each watched key's verdict. `paired` (runs lined up by paired.pair_up): a key's median is
    judged on its pairs' ratios, whose interval holds how runs differ, so no band of the
    baseline's runs is held against it; a mean's change is the median of its pairs' moves
    (paired.pair_mean_change: one run that stalled moves one pair), held against the band of
    both sides' runs' means (stats.mean_noise), but for where every pair moved past the
    limit the same way (paired.pairs_agree_past). Medians are judged without a pair that
    straddles a change of the machine's speed (_steady_pairs); means, on every pair (a stall
    is no mode)."""
    result = CheckResult([], _setup_warnings(base, new))
    confidence = f"{settings.confidence:.0%}"
    judged: list[int] = []
    """The verdicts with a change, judged once every key's is known (their band depends on how
    many there are)."""
    watched = {rule: _watched(rule, base) for rule in rules}
    spreads = {k: run_spread(base.samples[k]) for rule, keys in watched.items() for k in keys
               if not rule.by_mean}
    scales = {k: _step_scale(base, k) for rule, keys in watched.items() for k in keys
              if rule.by_mean}
    prior = common_spread([s for s in spreads.values() if s is not None], settings.prior_dof)
    steady, left_out = _steady_pairs(base, new) if paired else ((base, new), [])
    result.warnings += left_out
    pair_priors = _pair_priors(watched, *steady, settings.prior_dof) if paired else None
    for rule, keys in watched.items():
        for key in keys:
            sides = (base, new) if rule.by_mean else steady
            a, b = sides[0].samples[key], sides[1].samples.get(key, [])
            base_n, new_n = sum(map(len, a)), sum(map(len, b))
            if not new_n:
                verdict, change = MISSING, None
            elif min(base_n, new_n) < settings.min_samples:
                verdict, change = UNDECIDED, None
            else:
                verdict = OK
                change = _change(rule, a, b, scales.get(key), settings, pair_priors)
                judged.append(len(result.verdicts))
            result.verdicts.append(Verdict(rule, key, verdict, base_n, new_n, change,
                                           confidence))
    if not judged:
        raise ProfinferError(_none_judged(result.verdicts, base, settings))
    # The runs' noise holds for the whole check: each key's band at 1 - (1 - confidence) / keys.
    each = 1 - (1 - settings.confidence) / (len(judged) if settings.per_check else 1)
    for i in judged:
        v = result.verdicts[i]
        assert v.change is not None
        if v.rule.by_mean:
            a, b = base.samples[v.key], new.samples[v.key]
            noise = (None if paired and pairs_agree_past(a, b, scales[v.key], v.rule.max_change)
                     else mean_noise([a, b] if paired else [a], scales[v.key], each))
        else:
            own = spreads[v.key]
            noise = None if own is None or paired else run_noise(own, each, prior)
        result.verdicts[i] = replace(v, verdict=_judge(v.rule, v.change, noise), noise=noise)
    _unsched_warning(result, base, new)
    return result
