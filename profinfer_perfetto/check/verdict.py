"""Compare a candidate with a baseline under the rules: one verdict per watched key."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from profinfer_perfetto.check.baseline import Baseline, describe
from profinfer_perfetto.check.rules import Rule, Settings
from profinfer_perfetto.check.stats import Change, median_change

REGRESSION = "regression"
IMPROVEMENT = "improvement"
OK = "ok"
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

    @property
    def failed(self) -> bool:
        return self.verdict == REGRESSION

    def sentence(self) -> str:
        c = self.change
        if c is None:
            return f"{self.key}: {self.verdict} (baseline {self.base_n} samples, " \
                   f"candidate {self.new_n})"
        return (f"{self.key}: median {c.base_median / 1e3:.1f} -> {c.new_median / 1e3:.1f} us "
                f"({c.change:+.1%}, {self.confidence} CI {c.low:+.1%} .. {c.high:+.1%}; "
                f"limit {self.rule.max_change:+.0%}): {self.verdict}")


@dataclass
class CheckResult:
    verdicts: list[Verdict]
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(v.failed for v in self.verdicts)


def _watched(rule: Rule, base: Baseline) -> list[str]:
    keys = [k for k in base.samples if fnmatchcase(k, rule.keys)]
    if rule.top:
        keys = sorted(keys, key=lambda k: (-base.shares.get(k, 0.0), k))[: rule.top]
    return sorted(keys)


def _judge(rule: Rule, change: Change) -> str:
    worse = change.low if rule.direction == "increase" else -change.high
    better = -change.high if rule.direction == "increase" else change.low
    big_enough = abs(change.new_median - change.base_median) >= rule.min_abs_ns
    if worse > rule.max_change and big_enough:
        return REGRESSION
    if better > rule.max_change and big_enough:
        return IMPROVEMENT
    return OK


def compare(base: Baseline, new: Baseline, rules: tuple[Rule, ...],
            settings: Settings) -> CheckResult:
    result = CheckResult([])
    for what, value in base.made_from.items():
        if new.made_from.get(what, "") != value and what != "tool":
            result.warnings.append(
                f"the candidate's {what} ({new.made_from.get(what, '') or 'unknown'}) differs "
                f"from the baseline's ({value or 'unknown'})")
    if base.made_from.get("tool") != new.made_from.get("tool"):
        result.warnings.append(f"baseline made by {base.made_from.get('tool')}, candidate by "
                               f"{new.made_from.get('tool')}")
    if base.runs == 1:
        result.warnings.append(
            "the baseline is one run: the interval knows within-run noise only; a baseline of "
            "several runs (query 'runs/*.pftrace' --save-baseline) also knows how runs differ")
    confidence = f"{settings.confidence:.0%}"
    for rule in rules:
        for key in _watched(rule, base):
            a, b = base.samples[key], new.samples.get(key, [])
            base_n, new_n = sum(map(len, a)), sum(map(len, b))
            if not new_n:
                result.verdicts.append(Verdict(rule, key, MISSING, base_n, 0,
                                               confidence=confidence))
            elif min(base_n, new_n) < settings.min_samples:
                result.verdicts.append(Verdict(rule, key, UNDECIDED, base_n, new_n,
                                               confidence=confidence))
            else:
                change = median_change(a, b, settings.confidence, settings.resamples)
                result.verdicts.append(Verdict(rule, key, _judge(rule, change), base_n, new_n,
                                               change, confidence=confidence))
    if not result.verdicts:
        result.warnings.append(
            f"no rule matched a key of the baseline ({describe(base.made_from)})")
    return result
