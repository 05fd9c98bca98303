"""A baseline: the samples `check` compares, and what the runs were made from.

Samples are latency distributions in ns, keyed like `step/decode` (token-step latency),
`window/decode` (the wall time of each 8 consecutive steps, from the first one's start to the
last one's end, over 8: the time between steps included),
`op/decode/MUL_MAT/ffn_gate` (op instance time, all layers), `share/decode/MUL_MAT/ffn_gate`
(per step, the op's summed node time as parts per million of the step's time: what a change to
the op moves and a slower or faster machine, which slows every op alike, does not),
`rel/decode/MUL_MAT/ffn_gate` (per step, the op's time relative to the other nodes of its op in
the step, in ppm: a kernel's speed against the same kernel's on the step's other tensors) or, for
traces recorded with --sched, `interference/decode` (each step's time stalled on a thread
waiting for a CPU: the `interference` metric's stalled_ns, nearly always 0: rules judge it by
its mean), kept per run (trace), so that a baseline of several runs knows how much runs differ.
Each key also records its share of the phase's time, so rules can pick the ops that matter.
Baselines are JSON; traces given as a baseline are read into one on the fly.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from profinfer_perfetto import __version__
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.files import write_whole
from profinfer_perfetto.query.engines import AUTO, EngineChoice
from profinfer_perfetto.query.session import TraceQuery, over_traces

FORMAT = "profinfer-perfetto baseline 3"
"""3: window samples are wall time, the time between steps included (2: step latencies).
A file of another format is refused: its samples of a key are not those of this one."""
FORMAT_NAME = FORMAT.rsplit(" ", 1)[0]
SHARE = "share"
"""The key kind of an op's share of each step (parts per million of the step's time)."""
PPM = 1_000_000
REL = "rel"
"""The key kind of an op's time relative to the other roles of its op in the same step (ppm):
as the work of each role is the same from one decode step to the next, this is its time per
unit of work against the same kernel's on the step's other tensors, measured side by side. A
change to one role's kernel or tensor moves it in full (10 % slower: +10 %, whatever its share
of the step), and what slows a kernel everywhere (a slower or busier machine) moves it not."""
PER_STEP = (SHARE, REL)
"""The key kinds in ppm, one sample per step."""
STEP_KEY = "step"
"""The key kind of a phase's token-step latencies."""
STALLED_KEY = "interference"
"""The key kind of each step's time stalled waiting for a CPU (traces recorded with --sched)."""
WINDOW_KEY = "window"
"""The key kind of a phase's wall time per step over WINDOW consecutive steps, from the first
one's start to the last one's end (one sample per step that starts a window): what a run
sustains, which a CPU shared with another task slows even where its steps are too short for the
median step to show it (most run untouched), and where the task runs between steps, as the
scheduler may cut its slices there (the target's wakeup of its own log thread after each token:
a fresh-clone test saw decode stretched 2.1x, its steps not), and which a slower sampler, that
runs between steps too, slows as well."""
WINDOW = 8
MAX_SAMPLES = 20_000
"""Per key; a longer distribution is subsampled (seeded), which keeps its quantiles."""


@dataclass
class Baseline:
    made_from: dict[str, str]
    """model, ggml build, threads, counters, tool version: what makes two runs comparable."""
    samples: dict[str, list[list[int]]]
    """Per key, one list of samples per run."""
    shares: dict[str, float] = field(default_factory=dict)
    """Each op key's share of its phase's token-step time."""
    format: str = FORMAT

    def save(self, path: Path) -> None:
        write_whole(path, json.dumps(asdict(self), indent=1) + "\n")

    def share_of(self, key: str) -> float:
        """The share of its phase's time of the op behind an op or share key."""
        kind, _, rest = key.partition("/")
        return self.shares.get(f"op/{rest}", 0.0) if kind in ("op", *PER_STEP) else 0.0

    @property
    def runs(self) -> int:
        return max((len(r) for r in self.samples.values()), default=0)

    @staticmethod
    def saved(paths: list[Path]) -> Baseline | None:
        """The baseline file (query --save-baseline) that `paths` is, if it is one; None for
        traces to take a baseline from (each there)."""
        for path in paths:
            if not path.is_file():
                raise ProfinferError(f"no baseline at {path}")
        path = paths[0]
        if len(paths) > 1 or path.suffix != ".json":
            return None
        try:
            doc = json.loads(path.read_text())
        except OSError as exc:
            raise ProfinferError(f"cannot read {path}: {exc.strerror}") from None
        except (ValueError, RecursionError):
            raise ProfinferError(f"{path} is not a profinfer-perfetto baseline") from None
        wrong = _wrong(doc)
        if wrong:
            raise ProfinferError(f"{path} is not a profinfer-perfetto baseline: {wrong}")
        return Baseline(doc["made_from"], doc["samples"], doc.get("shares", {}))


def _is_int(value: Any) -> bool:
    """A sample: an integer that fits 64 bits."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 63


def _wrong(doc: Any) -> str | None:
    """What keeps a baseline file's JSON from being a baseline, if anything."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        named = doc.get("format") if isinstance(doc, dict) else None
        other = isinstance(named, str) and named.startswith(FORMAT_NAME)
        return (f"it is of another version's format ({named!r:.40}, not {FORMAT}): "
                "save it again from its traces (query TRACES --save-baseline FILE)" if other
                else f"it has no \"format\": \"{FORMAT}\"")
    made_from, samples, shares = doc.get("made_from"), doc.get("samples"), doc.get("shares", {})
    if not isinstance(made_from, dict) or not all(isinstance(v, str) for v in made_from.values()):
        return "its made_from is not an object of strings"
    if not isinstance(samples, dict):
        return "its samples are not an object"
    for key, runs in samples.items():
        if (not isinstance(runs, list) or not runs
                or not all(isinstance(r, list) and r and all(map(_is_int, r)) for r in runs)):
            return f"samples {key!r} is not a list of runs, each a list of integers"
    if not isinstance(shares, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in shares.values()):
        return "its shares are not an object of numbers"
    return None


def _model_of(command: str) -> str:
    words = command.split()
    for flag in ("-m", "--model"):
        if flag in words[:-1]:
            return Path(words[words.index(flag) + 1]).name
    return words[0] if words else ""


def _subsample(values: list[int]) -> list[int]:
    if len(values) <= MAX_SAMPLES:
        return values
    rng = np.random.default_rng(0)
    return sorted(rng.choice(values, MAX_SAMPLES, replace=False).tolist())


def from_traces(traces: list[Path], engine: EngineChoice = AUTO) -> Baseline:
    """Each trace a run; what they were made from is the first's."""
    return merged(runs_of(traces, engine))


def runs_of(traces: list[Path], engine: EngineChoice = AUTO) -> list[Baseline]:
    """A baseline of each trace, each what its own run was made from."""
    return over_traces(traces, run_baseline, engine)


def merged(runs: list[Baseline]) -> Baseline:
    """Baselines of runs as one of all of them; what they were made from is the first's."""
    samples: dict[str, list[list[int]]] = {}
    for run in runs:
        for key, per_run in run.samples.items():
            samples.setdefault(key, []).extend(per_run)
    shares = {k: sum(r.shares.get(k, 0.0) for r in runs) / len(runs)
              for k in samples if k.startswith("op/")}
    return Baseline(runs[0].made_from, samples, shares)


def run_baseline(q: TraceQuery) -> Baseline:
    """The samples of the run in a trace."""
    record = q.recording_args()
    threads = q.sql("select max(n_threads) from profinfer_graph").rows
    steps = q.sql("select step, phase, ts, dur from profinfer_step order by step").rows
    nodes = q.sql("select phase, op, role, dur from profinfer_node "
                  "where phase is not null order by graph, node").rows
    in_steps = q.sql("select s.step, s.phase, n.op, n.role, 1.0 * sum(n.dur) / max(s.dur, 1) "
                     "from profinfer_node n join profinfer_step s using (step) "
                     "group by s.step, n.op, n.role order by s.step, n.op, n.role").rows
    if not record:
        raise ProfinferError(f"{q.trace} has no recording in it: is it a profinfer-perfetto "
                             "trace?")
    samples: dict[str, list[int]] = {}
    phase_time: dict[str, int] = {}
    for _, phase, _, dur in steps:
        samples.setdefault(f"{STEP_KEY}/{phase}", []).append(int(dur))
        phase_time[phase] = phase_time.get(phase, 0) + int(dur)
    samples.update(_windows(steps))
    totals: dict[str, int] = {}
    if q.sql("select count(*) from sched").rows[0][0]:
        for phase, stalled in q.sql("select phase, stalled from profinfer_step_interference "
                                    "order by step").rows:
            samples.setdefault(f"{STALLED_KEY}/{phase}", []).append(int(stalled))
    for key, values in _per_step(in_steps).items():
        samples.setdefault(key, []).extend(values)
    for phase, op, role, dur in nodes:
        key = f"op/{phase}/{op}/{role}"
        samples.setdefault(key, []).append(int(dur))
        totals[key] = totals.get(key, 0) + int(dur)
    shares = {k: round(v / max(phase_time.get(k.split("/")[1], 0), 1), 6)
              for k, v in totals.items()}
    made_from = {
        "model": _model_of(str(record.get("command", ""))),
        "ggml": f"{record.get('ggml_version', '')} {record.get('ggml_commit', '')}".strip(),
        "threads": str(threads[0][0] if threads and threads[0][0] is not None else ""),
        "counters": str(record.get("counters", "")),
        "tool": str(record.get("tool", f"profinfer-perfetto {__version__}")),
    }
    return Baseline(made_from, {k: [_subsample(v)] for k, v in samples.items()}, shares)


def _windows(steps: list[tuple[Any, ...]]) -> dict[str, list[int]]:
    """WINDOW samples from (step, phase, ts, dur) rows in step order: for each WINDOW steps
    of one phase with no other step between them (consecutive numbers), their span from the
    first one's start to the last one's end, over WINDOW. A window across another phase's step
    (a server's next prompt) or a step lost from the trace is not taken."""
    if len(steps) < WINDOW:
        return {}
    number, ts, dur = (np.array([row[i] for row in steps], np.int64) for i in (0, 2, 3))
    phase = [row[1] for row in steps]
    joined = (np.diff(number) == 1) & np.array([a == b for a, b in pairwise(phase)])
    breaks = np.concatenate(([0], np.cumsum(~joined)))
    starts = np.flatnonzero(breaks[WINDOW - 1:] == breaks[:len(steps) - WINDOW + 1])
    spans = (ts[starts + WINDOW - 1] + dur[starts + WINDOW - 1] - ts[starts]) / WINDOW
    samples: dict[str, list[int]] = {}
    for start, span in zip(starts.tolist(), np.rint(spans).astype(int).tolist(), strict=True):
        samples.setdefault(f"{WINDOW_KEY}/{phase[start]}", []).append(span)
    return samples


def _per_step(rows: list[tuple[Any, ...]]) -> dict[str, list[int]]:
    """SHARE and REL samples from (step, phase, op, role, share of the step) rows, in step
    order: a role's REL is its share over the summed shares of its op's other roles in the
    step (none for an op of one role)."""
    samples: dict[str, list[int]] = {}
    by_op: dict[tuple[Any, ...], dict[str, float]] = {}
    for step, phase, op, role, share in rows:
        samples.setdefault(f"{SHARE}/{phase}/{op}/{role}", []).append(round(share * PPM))
        by_op.setdefault((step, phase, op), {})[role] = share
    for (_, phase, op), roles in by_op.items():
        total = sum(roles.values())
        for role, share in roles.items():
            if total - share > 0:
                samples.setdefault(f"{REL}/{phase}/{op}/{role}", []).append(
                    round(share / (total - share) * PPM))
    return samples


def shown(key: str, value: float) -> str:
    """A sample value of the key as people read it: a share in %, a ratio, a time in us."""
    if key.startswith(f"{SHARE}/"):
        return f"{value / PPM:.2%}"
    if key.startswith(f"{REL}/"):
        return f"{value / PPM:.3f}x the rest"
    return f"{value / 1e3:.1f} us"


def describe(made_from: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in made_from.items())
