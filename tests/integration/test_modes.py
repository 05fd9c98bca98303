"""Low-overhead modes record exactly what full tracing records of the same steps and ops.

The same seeded generation is recorded in full and in each mode; both traces are queried for
which ops each thread ran in which token step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.model.names import probe_args
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from tests.conftest import Cli
from tests.integration.test_record import completion

pytestmark = pytest.mark.root

OPS = "select step, op, tensor from profinfer_op"


def ops_by_step(trace: Path) -> tuple[Counter[tuple[int, str, str]], list[int]]:
    with TraceQuery(trace, EngineChoice("builtin")) as q:
        ops = Counter((int(s), o, t) for s, o, t in q.sql(OPS).rows)
        steps = [int(r[0]) for r in q.sql("select step from profinfer_step order by step").rows]
    return ops, steps


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Counter[tuple[int, str, str]], list[int]]:  # noqa: E501
    from scripts import assets
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("full") / "full.pftrace"
    cmd = completion(lambda tool, build="shared": assets.llama_bin(tool, build),
                     assets.model("tiny-llama"), 2, n=16)
    result = run_cli("record", "-o", out, "--", *cmd)
    assert result.returncode == 0, result.stderr
    return ops_by_step(out)


@pytest.mark.parametrize(
    ("options", "steps", "keep"),
    [
        (["--tokens", "3:7"], {3, 4, 5, 6}, None),
        (["--sample", "4"], {0, 4, 8, 12}, None),
        (["--tokens", "2:", "--sample", "5"], {2, 7, 12}, None),
        (["--no-barriers"], set(range(16)), None),
        (["--ops", "MUL_MAT,ffn_*"], set(range(16)),
         lambda op, tensor: op == "MUL_MAT" or tensor.startswith("ffn_")),
    ],
)
def test_a_mode_records_what_full_tracing_records(
    cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path,
    full: tuple[Counter[tuple[int, str, str]], list[int]], options: list[str], steps: set[int],
    keep: Callable[[str, str], bool] | None,
) -> None:
    out = tmp_path / "mode.pftrace"
    result = cli("record", "-o", out, *options, "--",
                 *completion(llama, model("tiny-llama"), 2, n=16))
    assert result.returncode == 0, result.stderr
    ops, token_steps = ops_by_step(out)
    full_ops, full_steps = full
    assert token_steps == full_steps == list(range(16))  # every step is still timed
    expected = Counter({k: n for k, n in full_ops.items()
                        if k[0] in steps and (keep is None or keep(k[1], k[2]))})
    assert ops == expected
    assert "lost 0 events" in result.stdout


def test_detach_records_a_chosen_step_whole(cli: Cli, llama: Callable[..., Path],
                                            model: Callable[[str], Path], tmp_path: Path) -> None:
    """--detach attaches the op probes only around step 60 of a 0.5 B model's generation: the
    step it traces is whole, the same ops as the in-kernel gate alone records.

    Attaching takes the kernel longer than a step on a loaded machine now and then, and the
    docs/record.md says a step can then be missed: what holds whatever the timing is that no other
    step is traced and that a traced step is whole (never a part of it)."""
    counts = []
    for options in (["--tokens", "60:61"], ["--tokens", "60:61", "--detach"]):
        out = tmp_path / "step.pftrace"
        result = cli("record", "-o", out, *options, "--",
                     *completion(llama, model("medium-llama"), 2, n=80))
        assert result.returncode == 0, result.stderr
        ops, _ = ops_by_step(out)
        assert {step for step, _, _ in ops} <= {60}
        counts.append(ops)
    assert {step for step, _, _ in counts[0]} == {60}  # the gate alone always traces it
    assert not counts[1] or counts[1] == counts[0]


def test_aggregate_counts_what_full_tracing_records(
    llama: Callable[..., Path], model: Callable[[str], Path]
) -> None:
    from profinfer_perfetto.capture.events import HIST_BUCKETS
    from profinfer_perfetto.capture.recorder import RecordRequest, plan, record
    from profinfer_perfetto.capture.selection import Selection
    from profinfer_perfetto.model.aggregate import op_stats
    from profinfer_perfetto.model.trace_model import build

    cmd = completion(llama, model("tiny-llama"), 2, n=16)
    full = build(record(RecordRequest(command=cmd), plan(RecordRequest(command=cmd))))
    request = RecordRequest(command=cmd, selection=Selection(aggregate=True))
    summed = build(record(request, plan(request)))
    assert summed.event_count < full.event_count / 10  # token and graph events only
    per_op: Counter[str] = Counter()
    for node in full.ops.node.tolist():
        per_op[full.op_label(node, -1)[0]] += 1  # a fused pair counts under its first op
    stats = op_stats(summed)
    counted: Counter[str] = Counter()
    for s in stats:
        counted[s.op] += s.count
    # A worker's last share of the capture is never closed: one per worker thread.
    assert sum(per_op.values()) - sum(counted.values()) in (0, 1)
    assert all(abs(per_op[op] - n) <= 1 for op, n in counted.items())
    assert set(counted) == set(per_op)
    assert all(s.work_ns > 0 for s in stats)

    # What holds by construction, whatever the times (probes/ggml.bpf.c close_share): each share
    # adds 1 to its tensor's count and to the log2 bucket of its work (bpf_log2l: bucket b holds
    # 2^(b-1) to 2^b - 1 ns, 0 ns too in bucket 1, the last bucket open-ended); max_work_ns is
    # one share's work (a plain compare-and-store, so two threads closing shares of one tensor at
    # once can miss the larger: no share is asserted to be at most max_work_ns).
    low = [0, 0] + [1 << (b - 1) for b in range(2, HIST_BUCKETS)]
    rows = summed.op_stats[-1][1]
    for row in rows:
        hist = [int(n) for n in row["hist"]]
        work, top = int(row["work_ns"]), int(row["max_work_ns"])
        assert sum(hist) == int(row["count"]) > 0
        assert sum(n * lo for n, lo in zip(hist, low, strict=True)) <= work
        if hist[-1] == 0:
            assert work < sum(n << b for b, n in enumerate(hist))
        assert hist[min(max(top.bit_length(), 1), HIST_BUCKETS - 1)] > 0
    assert sum(s.count for s in stats) == int(rows["count"].sum())
    # model/aggregate.py op_stats: p90_ns is 2^b for the first bucket b where the group's
    # cumulative count reaches 90 %, so more than 10 % of its shares lie in bucket b or above,
    # each at least 2^(b-1) ns: p90_ns < 20 x the mean share. (It is no lower bound of the
    # mean: a few preempted shares can raise the mean above the bucket of 90 % of them.)
    for s in stats:
        assert s.p90_ns >= 2 and s.p90_ns & (s.p90_ns - 1) == 0, s
        assert s.p90_ns <= 2 or s.p90_ns * s.count < 20 * s.work_ns, s


@pytest.mark.parametrize("exact", [False, True])
def test_floor_takes_the_traps_and_records_no_op(
    cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path,
    full: tuple[Counter[tuple[int, str, str]], list[int]], exact: bool,
) -> None:
    """--floor attaches the op probes with programs that return at once: each op of full
    tracing still takes its traps (the kernel counts the runs: by default one barrier call per
    op and thread, the graph loop's last one after its last node; with --exact also an op
    begin), no op is recorded, every token step is."""
    out = tmp_path / "floor.pftrace"
    result = cli("record", "-o", out, "--floor", *(["--exact"] if exact else []), "--",
                 *completion(llama, model("tiny-llama"), 2, n=16))
    assert result.returncode == 0, result.stderr
    ops, token_steps = ops_by_step(out)
    assert not ops and token_steps == full[1]
    with TraceQuery(out, EngineChoice("builtin")) as q:
        recorded = q.recording_args()
    runs = {fn: int(recorded.get(probe_args(fn)[0], 0))
            for fn in ("op_begin", "fused_op_begin", "barrier_enter")}
    if exact:
        assert runs["op_begin"] + runs["fused_op_begin"] == sum(full[0].values())
        assert runs["barrier_enter"] > 0
    else:
        assert runs["op_begin"] + runs["fused_op_begin"] == 0
        assert runs["barrier_enter"] == sum(full[0].values())
    assert "--floor" in result.stdout
