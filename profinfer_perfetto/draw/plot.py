"""The ProfStat figures, drawn from the same SQL the metrics run (matplotlib, SVG).

One figure per metric it illustrates:
- kv_growth: attention op time against KV length, a point per op instance and the metric's
  all-layers line per (op, role);
- op_cost: each (op, role, dtype)'s mean time against its MFLOP (log-log), the marker's area
  growing with its instances;
- roofline: each (phase, op, role, weight type, threads) of the roofline metric, achieved
  GFLOP/s against arithmetic intensity (log-log) by verdict, under the roofs it was held to;
- moe_experts: the share of tokens each expert took, a cell per (layer, expert), for the phase
  with the most routed tokens;
- token_latency: the histogram of token step times, a series per phase.

Each drawn element carries a `gid` (an `id` in the SVG) naming what it shows (a bar: its phase,
bin and count), so that a reader (or a test) finds a figure's points, cells and bars in the file.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from profinfer_perfetto.check.trend import Trend
from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.query.engines import Result
from profinfer_perfetto.query.session import TraceQuery

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _gid(*parts: object) -> str:
    """An element's id in the SVG: its parts joined by `_`, other characters than letters,
    digits, `.` and `-` as `-` (an XML name)."""
    return "_".join(re.sub(r"[^A-Za-z0-9.-]", "-", str(p)) for p in parts)


_KV_POINTS = "SELECT op, role, kv_len, dur FROM profinfer_kv_point ORDER BY op, role, kv_len"


def _rows(result: Result) -> list[dict[str, Any]]:
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def _kv_growth(q: TraceQuery, ax: Axes) -> int:
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for op, role, kv_len, dur in q.sql(_KV_POINTS).rows:
        points.setdefault((op, role), []).append((float(kv_len), float(dur) / 1e3))
    if not points:
        raise ProfinferError(f"{q.trace} has no attention ops of one-sequence decode steps with "
                             "a known KV length to draw")
    fits = {(r["op"], r["role"]): r for r in _rows(q.metric("kv_growth")) if r["layer"] is None}
    for (op, role), xy in points.items():
        xs, ys = zip(*xy, strict=True)
        dots = ax.scatter(xs, ys, s=8, alpha=0.6, label=f"{op} {role}")
        dots.set_gid(_gid("points", op, role))
        fit = fits.get((op, role))
        if fit is not None and fit["slope_ns_per_token"] is not None:
            lo, hi = min(xs), max(xs)
            line = ax.plot([lo, hi], [(fit["intercept_ns"] + fit["slope_ns_per_token"] * x) / 1e3
                                      for x in (lo, hi)], color=dots.get_facecolor()[0])[0]
            line.set_gid(_gid("fit", op, role))
    ax.set(xlabel="KV length (tokens)", ylabel="op time (us)",
           title="Attention op time against KV length (decode)")
    return len(points)


def _op_cost(q: TraceQuery, ax: Axes) -> int:
    rows = [r for r in _rows(q.metric("op_cost")) if r["mflop"] and r["mean_ns"]]
    if not rows:
        raise ProfinferError(f"{q.trace} has no ops with work to draw")
    by_op: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_op.setdefault(r["op"], []).append(r)
    for op, group in by_op.items():
        dots = ax.scatter([r["mflop"] for r in group], [r["mean_ns"] / 1e3 for r in group],
                          s=[12 + 4 * min(r["count"], 50) for r in group], alpha=0.7, label=op)
        dots.set_gid(_gid("points", op))
    ax.set(xscale="log", yscale="log", xlabel="work (MFLOP)", ylabel="mean op time (us)",
           title="Op time against the FLOPs its shapes imply")
    return len(by_op)


def _roofline(q: TraceQuery, ax: Axes) -> int:
    rows = _rows(q.metric("roofline"))
    if not rows:
        raise ProfinferError(f"{q.trace} holds no roofs: run `profinfer-perfetto calibrate`, "
                             "then record again")
    by_verdict: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_verdict.setdefault(r["verdict"], []).append(r)
    for verdict, group in sorted(by_verdict.items()):
        dots = ax.scatter([r["intensity"] for r in group], [r["gflop_per_s"] for r in group],
                          s=24, alpha=0.8, label=verdict)
        dots.set_gid(_gid("points", verdict))
    lo = min(r["intensity"] for r in rows) / 2
    hi = max(max(r["intensity"] for r in rows), max(r["ridge"] for r in rows)) * 2
    roofs = {(r["threads"], r["peak_gbyte_per_s"], r["peak_gflop_per_s"], r["roof_dtype"])
             for r in rows}
    for threads, gb, gflop, dtype in sorted(roofs):
        xs = [lo, gflop / gb, hi]
        line = ax.plot(xs, [min(gflop, x * gb) for x in xs], linestyle="--", color="grey")[0]
        line.set_gid(_gid("roof", threads, dtype))
        ax.annotate(f"{gflop:g} GFLOP/s ({dtype}), {gb:g} GB/s, {threads} threads",
                    (hi, gflop), fontsize=7, ha="right", va="bottom")
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)",
           ylabel="achieved GFLOP/s", title="Roofline: each (phase, op, role, weight type)")
    return len(by_verdict)


def _moe_experts(q: TraceQuery, ax: Axes) -> int:
    rows = _rows(q.metric("moe_experts"))
    if not rows:
        raise ProfinferError(f"{q.trace} has no Mixture-of-Experts routing to draw")
    tokens: dict[str, int] = {}
    for r in rows:
        tokens[r["phase"]] = tokens.get(r["phase"], 0) + int(r["activations"])
    phase = max(tokens, key=lambda p: tokens[p])
    picked = [r for r in rows if r["phase"] == phase]
    layers = sorted({int(r["layer"]) for r in picked})
    experts = sorted({int(r["expert"]) for r in picked})
    share = {(int(r["layer"]), int(r["expert"])): float(r["token_share"]) for r in picked}
    top = max(share.values())
    from matplotlib import colormaps, patches

    cmap = colormaps["Reds"]
    for (layer, expert), value in share.items():
        cell = patches.Rectangle((experts.index(expert), layers.index(layer)), 1, 1,
                                 facecolor=cmap(value / top if top else 0.0), edgecolor="white")
        cell.set_gid(_gid("cell", layer, expert))
        ax.add_patch(cell)
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    ax.figure.colorbar(ScalarMappable(Normalize(0, top), cmap), ax=ax, label="share of tokens")
    ax.set(xlim=(0, len(experts)), ylim=(0, len(layers)), xlabel="expert", ylabel="layer",
           title=f"Share of tokens routed to each expert ({phase})")
    ax.set_xticks([i + 0.5 for i in range(len(experts))], [str(e) for e in experts])
    ax.set_yticks([i + 0.5 for i in range(len(layers))], [str(layer) for layer in layers])
    return 0


def _token_latency(q: TraceQuery, ax: Axes) -> int:
    steps: dict[str, list[float]] = {}
    for r in _rows(q.metric("token_steps")):
        steps.setdefault(r["phase"], []).append(r["dur_ns"] / 1e6)
    if not steps:
        raise ProfinferError(f"{q.trace} has no token steps to draw")
    for phase, ms in steps.items():
        counts, edges = np.histogram(ms, bins=min(40, len(ms)))
        bars = ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", alpha=0.7,
                      label=phase)
        for i, (bar, count) in enumerate(zip(bars, counts.tolist(), strict=True)):
            bar.set_gid(_gid("bar", phase, i, count))
    ax.set(xlabel="step time (ms)", ylabel="token steps", title="Token step latency")
    return len(steps)


FIGURES: dict[str, Callable[[TraceQuery, Axes], int]] = {
    "kv_growth": _kv_growth,
    "op_cost": _op_cost,
    "moe_experts": _moe_experts,
    "roofline": _roofline,
    "token_latency": _token_latency,
}
"""Each figure: draws on the axes, returns how many series it drew (a legend for more than
one)."""


def figure(name: str) -> Callable[[TraceQuery, Axes], int]:
    """The figure called `name`."""
    draw = FIGURES.get(name)
    if draw is None:
        raise ProfinferError(f"no figure {name!r} (figures: {', '.join(FIGURES)})")
    return draw


def plot_svg(q: TraceQuery, name: str) -> bytes:
    """The figure `name` of the trace, as SVG."""
    draw = figure(name)
    return _svg(lambda ax: draw(q, ax))


def trend_svg(trends: list[Trend]) -> bytes:
    """`check --trend-plot`: each key's median run by run, relative to the first run, the
    candidate last; a key drifting past its limit drawn solid, the others dotted."""

    def draw(ax: Axes) -> int:
        for t in trends:
            ys = [m / t.medians[0] - 1 if t.medians[0] else 0.0 for m in t.medians]
            line = ax.plot(range(len(ys)), ys, marker="o", markersize=3, label=t.key,
                           linestyle="-" if t.drifting else ":")[0]
            line.set_gid(_gid("trend", t.key))
        limits = {t.limit if t.direction == "increase" else -t.limit for t in trends}
        for limit in limits:
            ax.axhline(limit, color="grey", linestyle="--", linewidth=0.8)
        runs = max((len(t.medians) for t in trends), default=1)
        ax.set_xticks(range(runs), [*(str(i + 1) for i in range(runs - 1)), "candidate"])
        ax.yaxis.set_major_formatter(lambda y, _: f"{y:+.0%}")
        ax.set(xlabel="baseline run (oldest first)", ylabel="median against the first run",
               title="Trend of each watched key")
        return len(trends)

    return _svg(draw)


def _svg(draw: Callable[[Axes], int]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    if 1 < draw(ax) <= 12:
        ax.legend(fontsize=7)
    out = io.BytesIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    return out.getvalue()
