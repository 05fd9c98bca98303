"""docs/benchmarks.md from bench/results.json: a section per benchmark, each table made by its
own function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def _ci(values: list[float], form: str = "+.1%") -> str:
    return f"{values[0]:{form}} ({values[1]:{form}} .. {values[2]:{form}})"


def _query_md(q: Any) -> list[str]:
    engines = [e for e in ("builtin", "trace_processor") if e in q["rounds"][0]]
    table = _table([f"query: op_summary on the 1 M-op trace ({q['trace_mib']} MiB), round",
                    *(f"{e} load s (with op_summary)" for e in engines)],
                   [[str(i), *(f"{r[e]['load_s']} ({r[e]['op_summary_s']})" for e in engines)]
                    for i, r in enumerate(q["rounds"], start=1)])
    return [*table, "", "The built-in engine's time over trace_processor's, median of the "
            f"rounds: {q['ratio_median']}."]


def _overhead_md(results: Any) -> list[str]:
    return _table(["overhead (llama-bench pp32 tg64, 6 interleaved pairs)",
                   "decode slowdown (median, 95 % CI)", "prefill slowdown",
                   "recorder CPU / capture time", "events lost"],
                  [[name, _ci(r["tg_slowdown"]), _ci(r["pp_slowdown"]),
                    f"{r['recorder_cpu_share']:.1%}", str(r["events_lost"])]
                   for name, r in results.items()])


def _steps_md(results: Any) -> list[str]:
    return _table(["traced decode step vs the 16 untraced steps before it (one run)",
                   "slowdown (median, 95 % CI)", "traced steps", "untraced step ms",
                   "a sample's whole cost, in steps", "so --sample 256 --detach"],
                  [[name, _ci(r["step_slowdown"]), str(r["traced_steps"]),
                    str(r["median_step_ms"]), str(r["sample_cost_steps"]),
                    f"{r['sample_256_slowdown']:+.2%}"] for name, r in results.items()])


def _capture_md(results: Any) -> list[str]:
    return _table(["capture (record's own process; streamed unless 'by default' or '--follow')",
                   "capture s", "events", "events/s", "recorder peak MB",
                   "recorder CPU / capture", "lost (longest gap between drains)", "bytes per op",
                   "trace written after the run (share of the capture)"],
                  [[name, f"{r['capture_s']:.1f}", str(int(r["events"])),
                    str(r["events_per_s"]), f"{r['peak_mb']:.0f}",
                    f"{r['recorder_cpu_share']:.1%}",
                    str(int(r["lost"])) + (f" ({r['drain_gap_ms']:.0f} ms)"
                                           if "drain_gap_ms" in r else ""),
                    str(r.get("bytes_per_op", "")),
                    _after_cell(r) if "after_s" in r else ""] for name, r in results.items()])


def _after_cell(r: Any) -> str:
    """Seconds the trace took after the run and their share of the capture; small ones finer."""
    after, share = r["after_s"], r["after_s"] / r["capture_s"]
    follower = (f"; its follower {r['follower_us_per_event']:.2f} µs of CPU per event"
                if "follower_us_per_event" in r else "")
    return (f"{after:.1f} s" if after >= 1 else f"{after:.2f} s") + (
        f" ({share:.0%})" if share >= 0.1 else f" ({share:.2%})") + follower


def _capacity_md(results: Any) -> list[str]:
    return _table(["capacity (tiny-llama, 2 threads)", "events kept", "events/s",
                   "events lost", "node descriptors lost"],
                  [[name, str(r["events"]), str(r["event_rate_per_s"]), str(r["events_lost"]),
                    str(r["nodes_lost"])] for name, r in results.items()])


def _encoding_md(e: Any) -> list[str]:
    return _table(["encoding (medium-llama, 32 tokens; best of 5 in turns)", "packets/s",
                   "bytes"],
                  [["profinfer-perfetto (args, flows, counters; deflated chunks)",
                    f"{e['ours_packets_per_s']} ({e['ours_cpu_us_per_packet']} us of CPU "
                    "per packet)",
                    f"{e['ours_bytes_per_op']} per op slice, "
                    f"{e['ours_bytes_per_event']} per recorded event"],
                   ["naive per-event perfetto_trace_pb2, no args",
                    str(e["naive_packets_per_s"]), f"{e['naive_bytes_per_packet']} per packet"]])


def _writer_md(w: Any) -> list[str]:
    return _table(["streamed writer (Gemma-3-270M, 320 tokens, 2 threads, 100 ms drains)",
                   "events", "CPU us per event (best of 3)", "events per CPU s",
                   "bytes per event"],
                  [["model, layout, encode, deflate", str(w["events"]), str(w["us_per_event"]),
                    str(w["events_per_cpu_s"]), str(w["bytes_per_event"])]])


def _write_md(w: Any) -> list[str]:
    how = {"one sequence": "one sequence (the pipelined threads)",
           "units": f"units, {w['workers']} worker processes ({w['cpus']} CPUs)"}
    return _table(["record's after-run write (tiny-llama 2 threads, tiled to "
                   f"{w['capture_s_at_server_rate']} s at 300 k events/s, drains of 30 k events;"
                   " spill read, model, layout, encode, deflate, file)",
                   "events", "write s (machine's CPU s), each round", "events/s",
                   "share of the capture", "bytes per event"],
                  [[how[mode], str(w["events"]),
                    " ".join(f"{s} ({c})" for s, c in zip(m["write_s"], m["cpu_s"],
                                                          strict=True)),
                    str(m["events_per_s"]),
                    f"{m['share_of_capture']:.0%} (target 10 %)", str(m["bytes_per_event"])]
                   for mode, m in w["modes"].items()])


def _after_md(a: Any) -> list[str]:
    def each(values: list[float], form: str) -> str:
        return " ".join(format(v, form) for v in values)

    setups = {k: v for k, v in a.items() if isinstance(v, dict)}
    return _table([f"record (follower: --follow), tiny-llama {a['tokens']} tokens (load "
                   f"{a['load_before']:.1f} before, {a['load_after']:.1f} after)",
                   "trace written s after the run, each round", "share of the capture",
                   "capture s", "events/s", "target eval tokens/s",
                   "tokens/s against the after-run's in its round (median)"],
                  [[name, each(r["after_s"], ".2f"), each(r["share_of_capture"], ".0%"),
                    each(r["capture_s"], ".1f"), each(r["events_per_s"], ",d"),
                    each(r["eval_tokens_s"], ".1f"),
                    f"{r['eval_ratio']:.3f}" if "eval_ratio" in r else ""]
                   for name, r in setups.items()])


def _windows_md(results: Any) -> list[str]:
    return _table(["recorder attached for whole 6 s windows, one long generation",
                   "decode step slowdown (median, 95 % CI)", "each window",
                   "inside the target's threads: kernel time per user time, less plain's "
                   "(median, 95 % CI)", "each window", "recorder CPU (of a core)",
                   "events/s", "plain step ms"],
                  [[name, _ci(r["slowdown"]), " ".join(f"{w:+.1%}" for w in r["windows"]),
                    _ci(r["inside"], "+.2%") if "inside" in r else "",
                    " ".join(f"{w:+.2%}" for w in r.get("inside_windows", [])),
                    f"{r['recorder_cpu_share']:.2%}" if "recorder_cpu_share" in r else "",
                    f"{r['events_per_s']:,d}" if "events_per_s" in r else "",
                    str(r["plain_step_ms"])] for name, r in results.items()])


def _traps_md(t: Any) -> list[str]:
    return _table(["a loop calling a function, an empty uprobe on its `push` or none",
                   "ns per call, each round", "user, kernel ns per call (tick accounting)"],
                  [["plain", " ".join(f"{v:.1f}" for v in t["plain_ns_per_call"]), ""],
                   ["probed", " ".join(f"{v:.0f}" for v in t["probed_ns_per_call"]),
                    " ".join(f"{u:.0f}, {k:.0f}" for u, k in t["probed_user_kernel_ns"])],
                   ["one trap (median)", f"{t['trap_ns']:.0f}",
                    f"{t['kernel_share_of_trap']:.0%} of it counted as kernel time"]])


def _one_trap_md(results: Any) -> list[str]:
    def spread(r: dict[str, float], unit: str = "%") -> str:
        if unit == "%":
            return f"{r['median']:+.1%}, {r['worst']:+.1%}"
        return f"{r['median']:+.2f}, {r['worst']:+.2f}{unit}"

    return _table(["one trap per op: derived from the barriers vs exact, same run",
                   "per op key: mean, median node time, work (median, worst key)",
                   "wait share, imbalance (median, worst diff)", "op begin shift (median, worst)",
                   "total"],
                  [[name, f"{spread(r['mean_error'])}; {spread(r['p50_error'])}; "
                    f"{spread(r['work_error'])}",
                    f"{spread(r['wait_share_diff'], '')}; {spread(r['imbalance_diff'], '')}",
                    spread(r["op_begin_us"], " us"), f"{r['total_error']:+.1%}"]
                   for name, r in results.items()])


def _calibrate_md(c: Any) -> list[str]:
    return _table(["calibrate: memory roof", "calibrate GB/s", "STREAM-like C GB/s",
                   "calibrate / C (median of 3)"],
                  [[f"{n} threads", str(m["ours_gb_s"]), str(m["stream_gb_s"]), str(m["ratio"])]
                   for n, m in c["memory"].items()]) + \
        _table(["roofline: Gemma-3-270M decode MUL_MAT", "dtype", "FLOP/byte", "ridge", "GB/s",
                "of the roof", "verdict"],
               [[r["role"], r["dtype"], str(r["intensity"]), str(r["ridge"]),
                 str(r["gbyte_per_s"]), str(r["roof_share"]), r["verdict"]]
                for r in c["decode_matmuls"]])


def _gate_md(results: Any) -> list[str]:
    gate = dict(results)
    graph = gate.pop("graph diff", None)
    lines = _table(["ab --runs 3 (paired check, default rules): setup: candidate", "checks",
                    "flagged", "of them the slowed op", "keys that were flagged"],
                   [[name, str(r["checks"]), str(r["flagged"]), str(r.get("named", "")),
                     ", ".join(r["which"])] for name, r in gate.items()])
    if graph is not None:
        lines += ["", f"check medium-llama-down3 --baseline medium-llama: exit {graph['exit']} "
                  "(4: the graph changed; 1: a timing regression as well, which takes precedence: "
                  "one run of each, 8 tokens)",
                  "", "```", *graph["said"], "```"]
    return lines


SECTIONS: dict[str, Callable[[Any], list[str]]] = {
    "query": _query_md, "overhead": _overhead_md, "steps": _steps_md, "memory": _capture_md,
    "server": _capture_md, "server-follow": _capture_md, "capacity": _capacity_md,
    "encoding": _encoding_md, "writer": _writer_md, "write": _write_md, "after": _after_md,
    "windows": _windows_md, "traps": _traps_md, "one-trap": _one_trap_md,
    "calibrate": _calibrate_md, "gate": _gate_md,
}
"""Each benchmark's table(s), in the page's order."""


def markdown(results: dict[str, Any]) -> str:
    """A section per benchmark measured, each with when and where it was measured (results made
    before benchmarks kept their own dates say "on or before" the file's date)."""
    lines: list[str] = []
    measured = results.get("measured", {})
    for name, section in SECTIONS.items():
        if name in results:
            when = measured.get(name, f"on or before {results['date']} on {results['machine']}")
            lines += ["", f"## {name}", "", f"Measured {when}.", *section(results[name])]
    return "\n".join(lines).lstrip("\n") + "\n"
