"""The regression gate's false alarms and power, from runs recorded once and judged in process.

Each recording is kept (under $PROFINFER_CACHE/bench/gate/SETUP/), so a change to `check`'s
statistics or keys is judged again on the same runs without recording them anew (delete the
folder to record afresh). Setups: tiny-llama and medium-llama at 1 thread
(pinned to the last CPU: this VM's two vCPUs differ in speed) and 2 threads, RUNS runs each,
then HOGGED runs with a busy loop pinned to the last CPU, then RUNS - POOLED runs each with
ffn_down's matmuls (named ffn_out) made 10 % and 5 % slower by a libggml-cpu built for it
(bench/slowed.py). The first POOLED runs of a setup are the baseline that its later runs, its
hogged runs and its slowed runs are checked against with the default rules.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.slowed import slowed_env
from profinfer_perfetto.check.baseline import Baseline, from_traces, merged
from profinfer_perfetto.check.rules import DEFAULT_RULES, Settings
from profinfer_perfetto.check.verdict import REGRESSION, compare
from scripts import assets

RUNS = 23
POOLED = 3
HOGGED = 5
SETUPS = (("tiny-llama", 1, 48), ("tiny-llama", 2, 48), ("medium-llama", 1, 32),
          ("medium-llama", 2, 32))
SLOWED = "ffn_out"
"""The nodes slowed: ffn_down's matmuls (its tensor is named ffn_out)."""
SLOWDOWNS = (10, 5)
"""Percent."""
FOLDER = assets.CACHE / "bench" / "gate"

Completion = Callable[[str, int, int], list[str]]


def _busy_loop(cpu: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"])


def recorded(folder: Path, count: int, command: list[str], hog: bool = False,
             env: dict[str, str] | None = None) -> list[Baseline]:
    """`count` recordings of `command` (under `record --sched`, so that stalls are seen for what
    they are, in `env`), each kept as FOLDER/i.pftrace and recorded only where missing (with a
    busy loop on the last CPU while they run if `hog`); each as its one-run baseline."""
    folder.mkdir(parents=True, exist_ok=True)
    traces = [folder / f"{i}.pftrace" for i in range(count)]
    missing = [t for t in traces if not t.exists()]
    busy = _busy_loop(max(os.sched_getaffinity(0))) if hog and missing else None
    try:
        for trace in missing:
            part = trace.with_suffix(".recording")
            subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record", "--sched",
                            "-o", str(part), "--", *command],
                           check=True, capture_output=True, env=env)
            part.rename(trace)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    return [from_traces([trace], "builtin") for trace in traces]


def _judged(base: Baseline, runs: list[Baseline], settings: Settings) -> dict[str, Any]:
    """Each run checked against `base` with the default rules: runs and keys flagged."""
    results = [compare(base, run, DEFAULT_RULES, settings) for run in runs]
    flagged = [[v.key for v in r.verdicts if v.verdict == REGRESSION] for r in results]
    return {"checks": len(runs), "flagged_runs": sum(bool(f) for f in flagged),
            "flagged_keys": sum(map(len, flagged)),
            "decided_keys": sum(v.change is not None for r in results for v in r.verdicts),
            "which": sorted({k for f in flagged for k in f})}


def bench_gate(completion: Completion, settings: Settings | None = None) -> dict[str, Any]:
    """False alarms (later runs of each setup), hogs and real slowdowns (to be caught)."""
    settings = settings or Settings()
    last = max(os.sched_getaffinity(0))
    results: dict[str, Any] = {}
    for model, threads, tokens in SETUPS:
        pin = ["taskset", "-c", str(last)] if threads == 1 else []
        command = [*pin, *completion(model, tokens, threads)]
        setup = f"{model} t{threads}"
        runs = recorded(FOLDER / f"{model}-t{threads}", RUNS, command)
        hogged = recorded(FOLDER / f"{model}-t{threads}-hog", HOGGED, command, hog=True)
        base = merged(runs[:POOLED])
        results[f"{setup}: reruns"] = _judged(base, runs[POOLED:], settings)
        results[f"{setup}: busy loop on CPU {last}"] = _judged(base, hogged, settings)
        for percent in SLOWDOWNS:
            slower = recorded(FOLDER / f"{model}-t{threads}-{SLOWED}{percent}", RUNS - POOLED,
                              command, env=slowed_env(SLOWED, percent))
            results[f"{setup}: {SLOWED} {percent} % slower"] = _judged(base, slower, settings)
    return results
