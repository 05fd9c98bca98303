"""The paired gate's false alarms and power, as CI would meet them: `ab` runs of PAIRS pairs.

For each setup (tiny-llama and medium-llama at 1 thread, pinned to the last CPU, and at 2 threads:
tiny-llama's each pinned to a CPU of its own, medium-llama's left to the scheduler) and each
candidate, CHECKS runs of `profinfer-perfetto ab --runs PAIRS --sched` against the same command as
the baseline: the same command again (a false alarm if flagged), ffn_down's matmuls (named ffn_out)
10 % and 5 % slower by a libggml-cpu built for it (bench/slowed.py), and a busy loop pinned to the
last CPU while each candidate run runs (both to be caught); and that slowed build with nothing
slowed (0 %), which tells what the build of its own moves (a check that flags another op than
ffn_out there was not caused by the slowing). The candidates take turns (check i of each, then
check i + 1 of each), so a slower hour of the machine falls on all of them alike.

Each `ab` folder is kept (under $PROFINFER_CACHE/bench/gate/SETUP/CANDIDATE/i, SETUP naming the
model, threads and tokens, `-strict` where each thread is pinned), recorded only where missing, and
judged again in process with the default rules, so a change to the paired statistics is judged on
the same runs (delete the folder to record afresh). $GATE_CHECKS (default 20) sets how many checks,
$GATE_PAIRS (default 3) how many pairs each (another number: its own folders, `-pN`, and rows);
$GATE_SETUPS (e.g. "tiny-llama-t1,tiny-llama-t2") which setups, whose rows replace those in
bench/results.json and leave the others; $GATE_PIN_THREADS=0 leaves every 2-thread setup's
threads to the scheduler, =1 pins each (their rows replace the setup's own way's). The graph diff
is measured on its own case: medium-llama-down3 (layer 3's ffn_down in Q4_0) against
medium-llama.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from bench.slowed import slowed_env
from profinfer_perfetto.check.paired import pair_up
from profinfer_perfetto.check.rules import DEFAULT_RULES, Settings
from profinfer_perfetto.check.verdict import REGRESSION, compare
from profinfer_perfetto.query.engines import EngineChoice
from scripts import assets

PAIRS = 3
SETUPS = (("tiny-llama", 1, 400, True), ("tiny-llama", 2, 48, True),
          ("medium-llama", 1, 32, True), ("medium-llama", 2, 32, False))
"""Model, threads, tokens, and whether each thread is pinned (_command). Tiny-llama at 1 thread
decodes 400 tokens (about 0.45 s) so that the busy loop, which shares the target's one CPU in
slices of about 4 ms, meets every candidate run: the 47 steps of a 48-token run took 36-73 ms
and were stalled in only 3 to 9 (docs/ab.md). At 2 threads 48 tokens were caught in 20 of 20."""
SLOWED = "ffn_out"
"""The nodes slowed: ffn_down's matmuls (its tensor is named ffn_out)."""
FOLDER = assets.CACHE / "bench" / "gate"
DONE = ".complete"
"""Written into an `ab` folder once its pairs are recorded and checked."""


class Completion(Protocol):
    """bench.run.completion: a seeded generation's command line."""

    def __call__(self, model: str, tokens: int, threads: int, *extra: str) -> list[str]: ...


Candidate = Callable[[list[str]], list[str]]


def _slowed(percent: int) -> Candidate:
    env = slowed_env(SLOWED, percent)
    names = ("LD_LIBRARY_PATH", "GGML_SLOW_NAME", "GGML_SLOW_PERCENT")
    return lambda command: ["env", *(f"{n}={env[n]}" for n in names), *command]


def _hogged(cpu: int) -> Candidate:
    """The command with a busy loop pinned to `cpu` for as long as it runs. The command starts
    once the loop runs pinned (its taskset has become the shell): on a busy machine the loop
    started late, after one 0.1 s run of tiny-llama had ended (2026-11-27, 1 check in 20)."""
    script = (f'taskset -c {cpu} sh -c "while :; do :; done" & hog=$!; '
              'until [ "$(readlink /proc/$hog/exe)" = "$(readlink -f /bin/sh)" ]; do :; done; '
              '"$@"; status=$?; kill $hog; exit $status')
    return lambda command: ["sh", "-c", script, "sh", *command]


def candidates(cpu: int) -> dict[str, Candidate]:
    """What each setup's command is checked against: a name for the table, and the candidate's
    command made from the baseline's."""
    return {"same command": lambda command: command,
            f"{SLOWED} 10 % slower": _slowed(10), f"{SLOWED} 5 % slower": _slowed(5),
            f"{SLOWED} 0 % slower (the slowed build, nothing slowed)": _slowed(0),
            f"busy loop on CPU {cpu} (candidate runs only)": _hogged(cpu)}


def _ab(folder: Path, baseline: list[str], candidate: list[str], pairs: int) -> None:
    """One `ab` run of `pairs` pairs into `folder`, unless it is there from an earlier run."""
    if (folder / DONE).exists():
        return
    shutil.rmtree(folder, ignore_errors=True)
    result = subprocess.run([sys.executable, "-m", "profinfer_perfetto", "ab", "-o", str(folder),
                             "--runs", str(pairs), "--sched", "--engine", "builtin",
                             "--baseline-cmd", shlex.join(baseline), "--", *candidate],
                            capture_output=True, text=True, errors="replace")
    if result.returncode not in (0, 1):
        raise RuntimeError(f"ab in {folder} exited {result.returncode}: {result.stderr}")
    (folder / DONE).write_text(result.stdout)


def _flagged(folder: Path, settings: Settings) -> list[str]:
    """The keys the paired check of `folder`'s runs flags, judged here and now."""
    base, new = pair_up(sorted(folder.glob("base-*.pftrace")),
                        sorted(folder.glob("cand-*.pftrace")), EngineChoice("builtin"))
    result = compare(base, new, DEFAULT_RULES, settings, paired=True)
    return [v.key for v in result.verdicts if v.verdict == REGRESSION]


def _counted(flagged: list[list[str]], slowed: bool) -> dict[str, Any]:
    """How many checks flagged anything; for a slowed candidate also how many flagged the
    slowed op itself (a check that flags only another op caught the change by the wrong key)."""
    counted = {"checks": len(flagged), "flagged": sum(bool(f) for f in flagged),
               "which": sorted({k for f in flagged for k in f})}
    if slowed:
        counted["named"] = sum(any(f"/{SLOWED}" in k for k in f) for f in flagged)
    return counted


def _setups() -> list[tuple[str, int, int, bool]]:
    wanted = os.environ.get("GATE_SETUPS")
    return [s for s in SETUPS
            if wanted is None or f"{s[0]}-t{s[1]}" in wanted.split(",")]


def _command(completion: Completion, model: str, threads: int, tokens: int, pinned: bool,
             last: int) -> tuple[str, list[str]]:
    """A setup's folder name and command: one thread pinned to the `last` CPU by taskset, more
    threads each pinned to a CPU of its own by llama.cpp (`--cpu-strict 1`: thread i on the
    mask's i-th CPU) where `pinned` (or $GATE_PIN_THREADS=1; =0: none). Pinned, tiny-llama t2's
    matmuls strayed half as far from pair to pair (16 pairs each way, in turns, 2026-12-06:
    attn_out's rel 7.3 % → 3.4 %, ffn_out's 4.7 % → 3.8 %); medium-llama t2's gate did no better
    pinned (2026-12-07: docs/ab.md)."""
    if threads == 1:
        return (f"{model}-t1-n{tokens}",
                ["taskset", "-c", str(last), *completion(model, tokens, threads)])
    pinned = {"0": False, "1": True}.get(os.environ.get("GATE_PIN_THREADS", ""), pinned)
    if not pinned:
        return f"{model}-t{threads}-n{tokens}", completion(model, tokens, threads)
    mask = hex(sum(1 << cpu for cpu in sorted(os.sched_getaffinity(0))[:threads]))
    return (f"{model}-t{threads}-n{tokens}-strict",
            completion(model, tokens, threads, "-C", mask, "--cpu-strict", "1"))


def bench_gate(completion: Completion, settings: Settings | None = None) -> dict[str, Any]:
    """False alarms (the same command), real slowdowns and a hog (to be caught), per setup;
    the graph diff of a retyped tensor."""
    settings = settings or Settings()
    checks = int(os.environ.get("GATE_CHECKS", "20"))
    pairs = int(os.environ.get("GATE_PAIRS", str(PAIRS)))
    more = "" if pairs == PAIRS else f", {pairs} pairs"
    last = max(os.sched_getaffinity(0))
    results: dict[str, Any] = {}
    for model, threads, tokens, pinned in _setups():
        setup, command = _command(completion, model, threads, tokens, pinned, last)
        setup += "" if pairs == PAIRS else f"-p{pairs}"
        flagged: dict[str, list[list[str]]] = {name: [] for name in candidates(last)}
        for i in range(checks):
            for name, candidate in candidates(last).items():
                folder = FOLDER / setup / name.split(" (")[0] / str(i)
                _ab(folder, command, candidate(command), pairs)
                flagged[name].append(_flagged(folder, settings))
        for name, runs in flagged.items():
            results[f"{model} t{threads}{more}: {name}"] = _counted(runs, name.startswith(SLOWED))
    results["graph diff"] = graph_diff(completion)
    return results


def graph_diff(completion: Completion) -> dict[str, Any]:
    """`check` of medium-llama-down3 against medium-llama: its exit code and what it names."""
    folder = FOLDER / "graph-diff"
    folder.mkdir(parents=True, exist_ok=True)
    traces = {}
    for model in ("medium-llama", "medium-llama-down3"):
        traces[model] = folder / f"{model}.pftrace"
        if not traces[model].exists():
            subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record", "-o",
                            str(traces[model]), "--", *completion(model, 8, 2)],
                           check=True, capture_output=True)
    result = subprocess.run([sys.executable, "-m", "profinfer_perfetto", "check",
                             str(traces["medium-llama-down3"]), "--baseline",
                             str(traces["medium-llama"]), "--engine", "builtin"],
                            capture_output=True, text=True)
    lines = result.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "the graph changed" in line), len(lines))
    return {"exit": result.returncode,
            "said": [line for line in lines[start:] if line.startswith(("the graph", "  "))]}
