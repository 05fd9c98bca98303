"""Benchmarks: `nox -s bench` (as root, after scripts/setup.sh). Writes bench/results.json and
bench/results.md.

    python -m bench.run [--only NAME ...]

query   seconds for `op_summary` on a 1 M-op trace, per engine available here. The trace is a
        real recording (medium-llama, 64 tokens, 2 threads) tiled in time to 1 M op slices,
        cached under $PROFINFER_CACHE/bench.
check   the regression gate's false positives: the same generation recorded 8 times, every
        later run checked against the first with the default rules.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto.capture.events import Kind
from profinfer_perfetto.capture.recorder import Recording, RecordRequest, plan, record
from profinfer_perfetto.encode.output import atomic_output
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets

HERE = Path(__file__).resolve().parent
CACHE = assets.CACHE / "bench"
MILLION = 1_000_000


def medium_recording(tokens: int = 64, threads: int = 2) -> Recording:
    cmd = [str(assets.llama_bin("llama-completion")), "-m", str(assets.model("medium-llama")),
           "-p", "Paris is the capital of", "-n", str(tokens), "-t", str(threads), "-no-cnv",
           "--no-warmup", "-s", "1"]
    request = RecordRequest(command=cmd)
    return record(request, plan(request))


def tiled(rec: Recording, op_events: int) -> Recording:
    """The recording repeated back to back until it holds `op_events` op begins."""
    per_copy = int(np.count_nonzero(rec.events["kind"] == Kind.OP_BEGIN))
    copies = -(-op_events // per_copy)
    span = int(rec.run.end_ns - rec.run.begin_ns)
    events, nodes = [], []
    for k in range(copies):
        e, n = rec.events.copy(), rec.nodes.copy()
        e["ts"] += k * span
        n["ts"] += k * span
        events.append(e)
        nodes.append(n)
    run = rec.run
    run.end_ns = run.begin_ns + copies * span
    return Recording(np.concatenate(events), np.concatenate(nodes), run)


def million_op_trace() -> Path:
    path = CACHE / "ops-1m.pftrace"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        model = build(tiled(medium_recording(), MILLION))
        with atomic_output(path) as out:
            write_perfetto(build_layout(model), out)
    return path


def bench_query() -> dict[str, Any]:
    trace = million_op_trace()
    results: dict[str, Any] = {"trace_mib": round(trace.stat().st_size / 2**20, 1)}
    for engine in ("builtin", "auto"):
        start = time.perf_counter()
        with TraceQuery(trace, engine) as q:
            loaded = time.perf_counter()
            ops = q.sql("select count(*) from profinfer_op").rows[0][0]
            q.metric("op_summary")
            done = time.perf_counter()
            name = q.engine.name
        results[name] = {"op_slices": ops, "load_s": round(loaded - start, 2),
                         "op_summary_s": round(done - start, 2)}
        if engine == "auto" and name == "builtin":
            del results[name]["op_slices"]
            break
    return results


def bench_check_false_positives(runs: int = 8) -> dict[str, Any]:
    """Record the same generation `runs` times; check every later run against the first."""
    import subprocess
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="profinfer-fp-"))
    results: dict[str, Any] = {}
    for model, threads, tokens in (("tiny-llama", 1, 48), ("medium-llama", 2, 32)):
        cmd = [str(assets.llama_bin("llama-completion")), "-m", str(assets.model(model)),
               "-p", "Paris is the capital of", "-n", str(tokens), "-t", str(threads),
               "-no-cnv", "--no-warmup", "-s", "1"]
        traces = []
        for i in range(runs):
            out = folder / f"{model}-{i}.pftrace"
            subprocess.run([sys.executable, "-m", "profinfer_perfetto", "record", "-o",
                            str(out), "--", *cmd], check=True, capture_output=True)
            traces.append(out)
        flagged_runs, flagged_keys, checked_keys = 0, 0, 0
        for trace in traces[1:]:
            proc = subprocess.run([sys.executable, "-m", "profinfer_perfetto", "check",
                                   str(trace), "--baseline", str(traces[0]), "--format", "json",
                                   "--engine", "builtin"], capture_output=True, text=True)
            verdicts = json.loads(proc.stdout)["verdicts"]
            bad = [v for v in verdicts if v["verdict"] == "regression"]
            flagged_runs += bool(bad)
            flagged_keys += len(bad)
            checked_keys += sum(v["verdict"] in ("ok", "regression", "improvement")
                                for v in verdicts)
        results[f"{model} t{threads}"] = {"checks": runs - 1, "flagged_runs": flagged_runs,
                                          "flagged_keys": flagged_keys,
                                          "decided_keys": checked_keys}
    return results


BENCHES: dict[str, Callable[[], dict[str, Any]]] = {
    "query": bench_query,
    "check": bench_check_false_positives,
}


def markdown(results: dict[str, Any]) -> str:
    lines = [f"Measured {results['date']} on {results['machine']}.", ""]
    query = results.get("query")
    if query:
        lines += ["| query (1 M-op trace) | engine | load s | op_summary s (total) |",
                  "|---|---|---|---|"]
        for engine in ("builtin", "trace_processor"):
            if engine in query:
                r = query[engine]
                lines.append(f"| {query['trace_mib']} MiB | {engine} | {r['load_s']} | "
                             f"{r['op_summary_s']} |")
    check = results.get("check")
    if check:
        lines += ["", "| check false positives (same run recorded again) | checks | runs flagged "
                  "| keys flagged / decided |", "|---|---|---|---|"]
        for name, r in check.items():
            lines.append(f"| {name} | {r['checks']} | {r['flagged_runs']} | "
                         f"{r['flagged_keys']} / {r['decided_keys']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHES), default=sorted(BENCHES))
    args = parser.parse_args()
    results_path = HERE / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    results["date"] = date.today().isoformat()
    results["machine"] = f"{platform.machine()} Linux {platform.release()}, " \
                         f"{len(__import__('os').sched_getaffinity(0))} cores"
    for name in args.only:
        results[name] = BENCHES[name]()
        print(name, json.dumps(results[name]))
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    (HERE / "results.md").write_text(markdown(results))


if __name__ == "__main__":
    main()
