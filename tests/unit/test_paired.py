"""`check --paired`: synthetic pairs of runs, each pair's two runs at one machine speed."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from profinfer_perfetto.check.baseline import Baseline
from profinfer_perfetto.check.paired import MAD_SD, ROBUST_PAIRS, odd_pair, pair_change
from profinfer_perfetto.check.rules import Rule, Settings
from profinfer_perfetto.check.stats import Spread, t_quantile
from profinfer_perfetto.check.verdict import OK, REGRESSION, WITHIN_NOISE, compare
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from tests import synthetic
from tests.conftest import Cli

B = ("--engine", "builtin")
MODES = (1.20, 1.35, 1.25)
"""The machine's speed during each pair (1: its speed when the unpaired baseline was made)."""


def trace(folder: Path, name: str, model: str = "tiny.gguf", **kwargs: object) -> Path:
    """A synthetic decode run (synthetic.decode_run's options) of `llama-synthetic -m MODEL`."""
    folder.mkdir(exist_ok=True)
    rec = synthetic.decode_run(**kwargs)  # type: ignore[arg-type]
    rec.run = replace(rec.run, cmdline=["llama-synthetic", "-m", model, "-t", "2"])
    path = folder / f"{name}.pftrace"
    with path.open("wb") as out:
        write_perfetto(build_layout(build(rec)), out)
    return path


def pairs(tmp_path: Path, **candidate: Any) -> tuple[Path, Path]:
    """Three pairs, the machine in another mode for each; the candidates made with `candidate`
    (decode_run's options)."""
    for i, speed in enumerate(MODES):
        trace(tmp_path / "base", f"run{i}", seed=60 + i, speed=speed, noise=0.04)
        trace(tmp_path / "cand", f"run{i}", seed=70 + i, speed=speed, noise=0.04, **candidate)
    return tmp_path / "base", tmp_path / "cand"


def verdicts(stdout: str) -> dict[str, str]:
    return {v["key"]: v["verdict"] for v in json.loads(stdout)["verdicts"]}


def test_a_slower_machine_mode_in_every_pair_is_not_flagged(cli: Cli, tmp_path: Path) -> None:
    """The same build, the machine slower by 20-35 % during each pair than when a baseline was
    made earlier: checked against that baseline the steps regress; paired, nothing does."""
    base, cand = pairs(tmp_path)
    for i in range(3):
        trace(tmp_path / "earlier", f"run{i}", seed=80 + i, noise=0.04)
    unpaired = cli("check", f"{cand}/*.pftrace", "--baseline", tmp_path / "earlier",
                   "--format", "json", *B)
    assert unpaired.returncode == 1, unpaired.stdout + unpaired.stderr
    assert verdicts(unpaired.stdout)["step/decode"] == "regression"
    paired = cli("check", f"{cand}/*.pftrace", "--baseline", base, "--paired", "--format",
                 "json", *B)
    assert paired.returncode == 0, paired.stdout + paired.stderr
    assert "regression" not in verdicts(paired.stdout).values()


def test_an_op_ten_percent_slower_in_every_candidate_is_flagged(cli: Cli,
                                                                tmp_path: Path) -> None:
    """Qcur 10 % slower in each candidate run, the pairs in different machine modes: flagged,
    and named in the table, JSON, JUnit and GitHub annotations as an unpaired check names it."""
    base, cand = pairs(tmp_path, slow="MUL_MAT/Qcur", factor=1.10)
    report = tmp_path / "report.xml"
    args = ("check", f"{cand}/*.pftrace", "--baseline", f"{base}/*.pftrace", "--paired", *B)
    result = cli(*args, "--junit", report, "--github")
    assert result.returncode == 1, result.stdout + result.stderr
    flagged = [line for line in result.stdout.splitlines()
               if line.endswith("regression") and not line.startswith("::")]
    assert len(flagged) == 1 and flagged[0].startswith("rel/decode/MUL_MAT/Qcur"), result.stdout
    assert "::error title=profinfer-perfetto%3A rel/decode/MUL_MAT/Qcur slower::" in result.stdout
    failures = [c.get("name") for c in ET.parse(report).getroot().iter("testcase")
                if c.find("failure") is not None]
    assert failures == ["rel/decode/MUL_MAT/Qcur"]
    doc = json.loads(cli(*args, "--format", "json").stdout)
    (qcur,) = [v for v in doc["verdicts"] if v["verdict"] == "regression"]
    assert qcur["change"] == pytest.approx(0.10, abs=0.02)
    assert 0.03 < qcur["interval"][0] < qcur["change"] < qcur["interval"][1]
    assert qcur["noise"] is None


@pytest.mark.parametrize("case", ["counts", "one pair", "models", "saved"])
def test_runs_that_are_no_pairs_are_bad_input(cli: Cli, tmp_path: Path, case: str) -> None:
    base, cand = pairs(tmp_path)
    baseline: str | Path = base
    if case == "counts":
        (cand / "run2.pftrace").unlink()
    elif case == "one pair":
        baseline, cand = base / "run0.pftrace", cand / "run0.pftrace"
    elif case == "models":
        trace(base, "run1", model="other.gguf", seed=61, speed=MODES[1])
    else:
        baseline = tmp_path / "saved.json"
        assert cli("query", f"{base}/*.pftrace", "--save-baseline", baseline, *B).returncode == 0
    result = cli("check", f"{cand}/*.pftrace" if cand.is_dir() else cand, "--baseline",
                 baseline, "--paired", *B)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    expected = {"counts": "there are 3 baseline runs and 2 candidate runs",
                "one pair": "needs 2 pairs of runs at least",
                "models": "(model other.gguf) is not that of", "saved": "is a saved baseline"}[case]
    assert expected in result.stderr


def test_a_pairs_change_is_the_mean_of_their_log_ratios() -> None:
    """Pairs in three machine modes, the candidate 10 % slower in each: the change is +10 %
    exactly, with no spread between pairs to widen it; ratios that spread give a t interval
    around their geometric mean."""
    modes = [100, 150, 80]
    change = pair_change([[m] * 9 for m in modes], [[round(m * 1.1)] * 9 for m in modes])
    assert change.change == pytest.approx(0.10) and change.low == pytest.approx(change.high)
    spread = pair_change([[100] * 9] * 3, [[105] * 9, [110] * 9, [115] * 9])
    assert spread.low < 0.05 < spread.change < 0.15 < spread.high
    assert spread.change == pytest.approx((1.05 * 1.10 * 1.15) ** (1 / 3) - 1)


def test_a_prior_moderates_the_pairs_spread() -> None:
    """With a prior, the interval's variance is the mean of the key's own (2 degrees of freedom
    from 3 pairs) and the prior's, weighted by their degrees of freedom, and t has their sum."""
    base, new = [[100] * 9] * 3, [[105] * 9, [110] * 9, [115] * 9]
    logs = np.log([1.05, 1.10, 1.15])
    own = float(np.var(logs, ddof=1))
    prior = Spread(own / 4, 8)
    change = pair_change(base, new, prior=prior)
    half = t_quantile(0.975, 10) * math.sqrt((8 * own / 4 + 2 * own) / 10 / 3)
    assert change.low == pytest.approx(math.expm1(logs.mean() - half))
    assert change.high == pytest.approx(math.expm1(logs.mean() + half))


def test_from_robust_pairs_one_odd_pair_moves_neither_the_change_nor_its_interval() -> None:
    """Six pairs, the candidate 9-11 % slower in five and 20 % faster in the sixth (one of its
    processes in another mode): the mean of the log ratios reads about +4 % with an interval
    from below 0, the median +10 % with one clear of +5 %. Below ROBUST_PAIRS, the mean."""
    assert ROBUST_PAIRS <= 6
    ratios = [1.09, 1.10, 1.11, 1.10, 1.095, 0.80]
    base, new = [[1000] * 9] * 6, [[round(1000 * r)] * 9 for r in ratios]
    change = pair_change(base, new)
    assert 0.09 < change.change < 0.11 and change.low > 0.05
    logs = np.log(np.array([round(1000 * r) for r in ratios]) / 1000)
    deviation = MAD_SD * float(np.median(np.abs(logs - np.median(logs))))
    half = t_quantile(0.975, 5) * deviation * math.sqrt(math.pi / 2 / 6)
    assert change.low == pytest.approx(math.expm1(float(np.median(logs)) - half))
    mean = pair_change(base[:3], [new[0], new[1], new[5]])
    assert mean.change == pytest.approx(math.expm1(float(np.mean(logs[[0, 1, 5]]))))
    assert mean.low < 0


def test_an_op_slower_in_every_pair_is_caught_through_the_rules_other_keys() -> None:
    """Key a is 10 % slower in every pair, but its three pairs agree less well (±5 %) than the
    rule's other keys do (±1 %): its own variance (2 degrees of freedom, t of 4.3) hides the
    change, the spread common to the rule's keys (stats.common_spread, prior_dof 8) shows it."""
    base = {f"rel/decode/OP/{k}": [[1000] * 9] * 3 for k in "abcdefgh"}
    new = {f"rel/decode/OP/{k}": [[1000 + d] * 9 for d in (0, 10, -10)] for k in "bcdefgh"}
    new["rel/decode/OP/a"] = [[r] * 9 for r in (1100, 1160, 1060)]
    rule = Rule("ops", "rel/decode/*", 0.03)

    def flagged(dof: float) -> bool:
        result = compare(Baseline({}, base), Baseline({}, new), (rule,),
                         Settings(prior_dof=dof), paired=True)
        return [v.key for v in result.verdicts if v.verdict == REGRESSION] == ["rel/decode/OP/a"]

    assert flagged(8) and not flagged(0)


MODE = {"Kcur": 1.15, "Vcur": 1.15, "Qcur": 1.12, "attn_out": 1.06, "ffn_up": 0.97,
        "ffn_gate": 0.97, "ffn_out": 0.85}
"""How the machine's other speed mode moves each op's time against its op's other nodes (as
tiny-llama's and medium-llama's did at 2 threads here: docs/ab.md)."""


def straddling(slower: float, odd: int | None, runs: int = 3) -> tuple[Baseline, Baseline]:
    """Pairs of runs whose candidate's ffn_out is `slower` (1.1: 10 % slower) in every pair,
    with ±1 % of noise from pair to pair, and whose `odd` pair's candidate run came in the
    machine's other mode (MODE)."""
    rng = np.random.default_rng(5)
    base: dict[str, list[list[int]]] = {}
    new: dict[str, list[list[int]]] = {}
    for op, moved in MODE.items():
        key = f"rel/decode/MUL_MAT/{op}"
        base[key] = [[100_000] * 9 for _ in range(runs)]
        new[key] = [[round(100_000 * (slower if op == "ffn_out" else 1.0)
                           * (moved if i == odd else 1.0) * rng.normal(1, 0.01))] * 9
                    for i in range(runs)]
    return Baseline({}, base), Baseline({}, new)


def slower_ops(base: Baseline, new: Baseline) -> tuple[list[str], list[str]]:
    """What the paired check of a `rel` rule of +3 % (the default until 2026-12-07) flags,
    and its warnings."""
    rule = Rule("ops", "rel/decode/*", 0.03)
    result = compare(base, new, (rule,), Settings(), paired=True)
    return [v.key for v in result.verdicts if v.verdict == REGRESSION], result.warnings


def test_a_pair_straddling_a_change_of_the_machines_mode_is_left_out() -> None:
    """Three pairs, ffn_out 10 % slower in each, the second pair's candidate run in the
    machine's other mode (its ffn_out 15 % faster against the rest): judged on all three, the
    mean of the log ratios and its wide interval hide the change; the odd pair lies far from
    the others on most keys, and without it the change is caught, the warning naming it."""
    base, new = straddling(1.1, odd=1)
    odd = odd_pair(base, new)
    assert odd is not None and odd[0] == 1 and odd[1] > 0.05
    flagged, warnings = slower_ops(base, new)
    assert flagged == ["rel/decode/MUL_MAT/ffn_out"]
    assert [w for w in warnings if w.startswith("pair 2 of 3 (each side's run 2 by name)")]
    change = pair_change(base.samples["rel/decode/MUL_MAT/ffn_out"],
                         new.samples["rel/decode/MUL_MAT/ffn_out"])
    assert change.low < 0.03


@pytest.mark.parametrize("case", ["no odd pair", "two pairs", "six pairs", "two odd"])
def test_no_pair_is_left_out_where_none_can_be_told(case: str) -> None:
    """A change of the candidate's moves every pair alike: no pair is odd. With two pairs
    neither is the odd one; from ROBUST_PAIRS the median is judged, needing no help; where two
    of three lie far, which is the odd one is not known."""
    base, new = {"no odd pair": lambda: straddling(1.1, None),
                 "two pairs": lambda: straddling(1.1, 1, runs=2),
                 "six pairs": lambda: straddling(1.1, 1, runs=6),
                 "two odd": two_odd}[case]()
    assert odd_pair(base, new) is None
    assert not slower_ops(base, new)[1]


def two_odd() -> tuple[Baseline, Baseline]:
    """Three pairs, the first and the second each straddling a change of mode, the other way."""
    base, new = straddling(1.0, odd=0)
    for key, runs in new.samples.items():
        runs[1] = [round(v / MODE[key.rsplit("/", 1)[1]] ** 2) for v in runs[1]]
    return base, new


STALLS = Rule("stalls", "interference/decode", 0.02, statistic="mean")


def stall_verdict(base: list[list[int]], new: list[list[int]], paired: bool) -> str:
    """The stall rule's verdict on runs of 50 steps of 1000 ns with these stalls per step."""
    steps = [[1000] * 50] * len(base)
    result = compare(Baseline({}, {"step/decode": steps, "interference/decode": base}),
                     Baseline({}, {"step/decode": steps, "interference/decode": new}),
                     (STALLS,), Settings(), paired=paired)
    return result.verdicts[0].verdict


def test_a_stall_in_every_candidate_run_is_caught_past_a_stalled_baseline_run() -> None:
    """A busy loop stalls every candidate run (half of 20 of its 50 steps: 20 % of a step on
    average); one baseline run was stalled too, by another task (70 % of 10 steps: 14 %). The
    band of the baseline's runs (0, 14 and 0 %: about ±40 %) is wider than the move (+15 %),
    so the unpaired check calls it noise. Paired, each candidate run stalled more than its own
    baseline run by more than the limit, and the band is not held against that. Where one pair
    did not move, or there are only two pairs, the band decides as before."""
    quiet, stalled, busy = [0] * 50, [700] * 10 + [0] * 40, [500] * 20 + [0] * 30
    base = [quiet, stalled, quiet]
    assert stall_verdict(base, [busy] * 3, paired=False) == WITHIN_NOISE
    assert stall_verdict(base, [busy] * 3, paired=True) == REGRESSION
    assert stall_verdict(base, [busy, quiet, busy], paired=True) == WITHIN_NOISE
    assert stall_verdict(base[:2], [busy] * 2, paired=True) == WITHIN_NOISE


def test_a_stall_is_judged_on_every_pair_where_an_odd_pair_is_left_out() -> None:
    """A busy loop stalls every candidate run, one of which also came in the machine's other
    mode: the medians are judged without that pair, the stalls on all three, whose every
    candidate run stalled more than its own baseline run (paired.pairs_agree_past, which two
    pairs could not satisfy)."""
    base, new = straddling(1.0, odd=2)
    quiet, busy = [0] * 50, [500] * 20 + [0] * 30
    for side, stalls in ((base, [quiet, [700] * 10 + [0] * 40, quiet]), (new, [busy] * 3)):
        side.samples.update({"step/decode": [[1000] * 50] * 3, "interference/decode": stalls})
    result = compare(base, new, (STALLS,), Settings(), paired=True)
    assert result.warnings[0].startswith("pair 3 of 3")
    assert result.verdicts[0].verdict == REGRESSION


def test_one_candidate_run_stalled_for_a_while_is_not_a_change_of_the_pairs() -> None:
    """Something beside the target took a CPU during one candidate run (40 % of its steps
    stalled for a whole step: 40 % of a step on average), no other run stalled. Unpaired, the
    pooled mean moved by a third of that (+13 % of a step) past a band of quiet runs; paired,
    the median of the three pairs' moves did not move (paired.pair_mean_change)."""
    quiet, stalled = [0] * 50, [1000] * 20 + [0] * 30
    base, new = [quiet] * 3, [quiet, quiet, stalled]
    assert stall_verdict(base, new, paired=False) == REGRESSION
    assert stall_verdict(base, new, paired=True) == OK


def test_candidate_runs_that_stall_as_unevenly_as_runs_do_are_not_a_change() -> None:
    """The gate's tiny-llama t2 check 0 of 2026-12-07 (the same build): the baseline's three
    runs stalled alike (2.1, 2.6, 2.4 % of a step), the candidate's 7.2, 0 and 8.2 %. Against a
    band of the baseline's runs alone the median move (+5.1 %) was a regression; the candidate's
    runs stray as far from each other as that, so against both sides' band it is noise. A busy
    loop in every candidate run still moves every pair past the limit."""
    def stalled(ns: int) -> list[int]:
        return [ns] + [0] * 49

    base = [stalled(1050), stalled(1300), stalled(1200)]
    assert stall_verdict(base, [stalled(3600), stalled(0), stalled(4100)],
                         paired=True) == WITHIN_NOISE
    assert stall_verdict(base, [stalled(3600), stalled(4000), stalled(4100)],
                         paired=True) == REGRESSION


@pytest.mark.parametrize("case", ["one run", "earlier runs", "unquoted", "rules"])
def test_ab_says_bad_input_before_it_records(cli: Cli, tmp_path: Path, case: str) -> None:
    """What would make `ab` fail is said (one sentence, exit 2) before any run is recorded."""
    folder = tmp_path / "ab"
    args = ["--runs", "2", "--baseline-cmd", "true"]
    if case == "one run":
        args[1] = "1"
    elif case == "earlier runs":
        folder.mkdir()
        (folder / "cand-00.pftrace").write_bytes(b"")
    elif case == "unquoted":
        args[3] = "llama-cli -p 'hello"
    else:
        (tmp_path / "rules.toml").write_text("[settings]\nconfidence = 2\n")
        args += ["--rules", str(tmp_path / "rules.toml")]
    result = cli("ab", "-o", folder, *args, "--", "true")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not list(folder.glob("base-*")), "nothing recorded"
    expected = {"one run": "needs 2 pairs at least", "earlier runs": "runs of an earlier ab",
                "unquoted": "No closing quotation", "rules": "confidence = 2"}[case]
    assert expected in result.stderr
