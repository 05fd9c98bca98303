"""Every kind of trace `record` writes loads clean in Perfetto's own trace_processor.

One real recording per kind (full; each low-overhead mode; Chrome JSON; a trace cut short; a
lossy one) is loaded through the `perfetto` Python API into the trace_processor_shell that
PROFINFER_TP_BIN names. A kind passes when trace_processor's `stats` table has no row of
severity `error` or `data_loss` with a value above 0, and the trace holds, in trace_processor's
own tables, what the CLI's summary said it wrote. The check is independent of the project's
query code: plain SQL on trace_processor's tables only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

from scripts import assets
from tests.conftest import run_cli

TP_BIN = os.environ.get("PROFINFER_TP_BIN", "")

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not TP_BIN, reason="PROFINFER_TP_BIN is not set: these tests load traces "
                       "into a trace_processor_shell binary (export PROFINFER_TP_BIN=PATH)"),
]

PROMPT = "Paris is"


@dataclass(frozen=True)
class Kind:
    """A kind of trace: how it is recorded, and the token steps whose ops it keeps."""

    name: str
    options: tuple[str, ...] = ()
    model: str = "tiny-llama"
    tokens: int = 4
    chosen: frozenset[int] | None = None  # steps with op slices; None: every step

    @property
    def json(self) -> bool:
        return "--json" in self.options


KINDS = (
    Kind("full"),
    Kind("tokens", ("--tokens", "1:3"), chosen=frozenset({1, 2})),
    Kind("sample", ("--sample", "2"), chosen=frozenset({0, 2})),
    Kind("ops", ("--ops", "MUL_MAT,ffn_*")),
    Kind("aggregate", ("--aggregate",)),
    Kind("no-barriers", ("--no-barriers",)),
    # Between samples the op probes are detached; removing them takes the kernel ~1 s, so a
    # sample comes 64 steps of a 0.5 B model (> 1.5 s) after the first (step 0, always missed:
    # no probes yet when it starts).
    Kind("sample-detach", ("--sample", "64", "--detach"), model="medium-llama", tokens=72,
         chosen=frozenset({0, 64})),
    Kind("json", ("--json",)),
    # 2000 tokens of a 0.5 B model take far longer than 2 s: the run is cut short.
    Kind("cut-short", ("--duration", "2"), model="medium-llama", tokens=2000),
    # Rings of 16 pages (1024 events) against ~16 k events sent within one 100 ms drain.
    Kind("lossy", ("--ring-pages", "16"), tokens=16),
)


@dataclass(frozen=True)
class Summary:
    """What `record` printed about the trace it wrote."""

    status: str
    token_steps: int
    ops: int | None  # None with --aggregate
    dag_edges: int
    events: int
    lost_events: int
    lost_nodes: int


def parse_summary(stdout: str) -> Summary:
    def one(pattern: str) -> re.Match[str]:
        found = re.search(pattern, stdout, re.MULTILINE)
        assert found, f"no line like {pattern!r} in the summary:\n{stdout}"
        return found

    # The launched target shares the recorder's stdout: its text can precede "recorded".
    status = one(r"recorded \S+ \(pid \d+\): (.+)$")[1]
    steps = one(r"^  token steps (\d+)")[1]
    graphs = one(r"^  graphs \d+, (?:ops summed in BPF \(--aggregate\)|ops (\d+) on \d+ "
                 r"threads), DAG edges (\d+)$")
    events = one(r"^  events (\d+), lost (\d+) events and (\d+) node descriptors")
    return Summary(status=status, token_steps=int(steps),
                   ops=None if graphs[1] is None else int(graphs[1]), dag_edges=int(graphs[2]),
                   events=int(events[1]), lost_events=int(events[2]), lost_nodes=int(events[3]))


@dataclass
class Loaded:
    kind: Kind
    summary: Summary
    stdout: str
    tp: Any  # perfetto.trace_processor.TraceProcessor

    @property
    def arg(self) -> str:
        """Where trace_processor keeps our args: debug annotations, or Chrome JSON args."""
        return "args" if self.kind.json else "debug"

    def rows(self, sql: str) -> list[Any]:
        return list(self.tp.query(sql))

    def count(self, sql: str) -> int:
        (row,) = self.rows(f"select count(*) as n from ({sql})")
        return int(row.n)

    def op_slices(self, where: str = "1") -> str:
        return (f"select * from slice where extract_arg(arg_set_id, '{self.arg}.node') is not null"
                f" and ({where})")


@pytest.fixture(scope="module", params=KINDS, ids=lambda k: k.name)
def loaded(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    kind: Kind = request.param
    out = tmp_path_factory.mktemp(kind.name) / ("run.json" if kind.json else "run.pftrace")
    cmd = [str(assets.llama_bin("llama-completion")), "-m", str(assets.model(kind.model)),
           "-p", PROMPT, "-n", str(kind.tokens), "-t", "2", "-no-cnv", "--no-warmup", "-s", "1"]
    result = run_cli("record", "-o", out, *kind.options, "--", *cmd)
    assert result.returncode == 0, result.stderr
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=TP_BIN))
    try:
        yield Loaded(kind, parse_summary(result.stdout), result.stdout, tp)
    finally:
        tp.close()


def test_loads_without_errors_or_data_loss(loaded: Loaded) -> None:
    bad = loaded.rows("select name, idx, severity, source, value, description from stats "
                      "where severity in ('error', 'data_loss') and value > 0 order by name")
    assert not bad, f"trace_processor's stats for the {loaded.kind.name} trace:\n" + "\n".join(
        f"  {r.name}[{r.idx}] {r.severity} ({r.source}) = {r.value}: {r.description}"
        for r in bad)


def test_holds_what_the_cli_said(loaded: Loaded) -> None:
    kind, said, arg = loaded.kind, loaded.summary, loaded.arg
    assert loaded.count("select id from slice") > 0
    (rec,) = loaded.rows(
        f"select extract_arg(arg_set_id, '{arg}.status') as status, "
        f"extract_arg(arg_set_id, '{arg}.complete') as complete, "
        f"extract_arg(arg_set_id, '{arg}.events') as events, "
        f"extract_arg(arg_set_id, '{arg}.events_lost') as events_lost, "
        f"extract_arg(arg_set_id, '{arg}.nodes_lost') as nodes_lost "
        "from slice where name = 'record'")
    assert rec.status == said.status
    assert bool(rec.complete) == (said.status == "complete")
    assert (rec.events, rec.events_lost, rec.nodes_lost) == (
        said.events, said.lost_events, said.lost_nodes)
    cut = loaded.rows("select name from slice where name like 'trace cut short: %'")
    assert [r.name for r in cut] == ([] if said.status == "complete"
                                     else [f"trace cut short: {said.status}"])

    # Token steps are always timed, whatever the mode; a complete run that lost no event has
    # one per token.
    steps = loaded.count("select id from slice where name in ('prefill', 'decode', 'encode')")
    assert steps == said.token_steps
    if said.status == "complete" and said.lost_events == 0:
        assert steps == kind.tokens
    if said.ops is None:  # --aggregate: no op events
        assert kind.name == "aggregate"
    else:
        assert loaded.count(loaded.op_slices()) == said.ops
    CHECKS[kind.name](loaded)


def _ops_outside(loaded: Loaded, chosen: frozenset[int]) -> int:
    """Op slices that start outside the token steps `chosen`."""
    steps = ", ".join(map(str, sorted(chosen)))
    return loaded.count(loaded.op_slices(
        "not exists (select 1 from slice s where s.name in ('prefill', 'decode') "
        f"and extract_arg(s.arg_set_id, '{loaded.arg}.step') in ({steps}) "
        "and s.ts <= slice.ts and slice.ts <= s.ts + s.dur)"))


def _check_full(loaded: Loaded) -> None:
    assert loaded.summary.status == "complete" and loaded.summary.lost_events == 0
    assert loaded.count(loaded.op_slices()) > 0
    assert loaded.count("select id from slice where name = 'barrier wait'") > 0
    # A flow per DAG edge between two op slices of the calling thread.
    flows = loaded.count("select id from flow")
    assert 0 < flows <= loaded.summary.dag_edges


def _check_gated(loaded: Loaded) -> None:
    """--tokens, --sample, --sample --detach: op slices in the chosen steps only."""
    assert loaded.kind.chosen is not None
    if "--detach" not in loaded.kind.options:
        assert loaded.count(loaded.op_slices()) > 0, "no op slices: no chosen step was traced"
    # With --detach a chosen step is missed when the kernel takes longer to remove the probes
    # than the steps in between last (docs/record.md; seen on a loaded machine): what holds
    # whatever the timing is that no op lies outside a chosen step, and that the trace loads
    # clean.
    assert _ops_outside(loaded, loaded.kind.chosen) == 0


def _check_ops(loaded: Loaded) -> None:
    arg = loaded.arg
    assert loaded.count(loaded.op_slices()) > 0
    assert loaded.count(loaded.op_slices(
        f"extract_arg(arg_set_id, '{arg}.op') != 'MUL_MAT' "
        f"and extract_arg(arg_set_id, '{arg}.tensor') not like 'ffn\\_%' escape '\\'")) == 0


def _check_aggregate(loaded: Loaded) -> None:
    assert loaded.count(loaded.op_slices()) == 0
    assert loaded.count("select id from counter_track where name like '% work ms'") > 0
    assert loaded.count("select id from slice where name = 'graph CPU'") > 0


def _check_no_barriers(loaded: Loaded) -> None:
    assert loaded.count(loaded.op_slices()) > 0
    assert loaded.count("select id from slice where name = 'barrier wait'") == 0


def _check_json(loaded: Loaded) -> None:
    assert loaded.count(loaded.op_slices()) > 0
    assert loaded.count("select id from flow") > 0


def _check_cut_short(loaded: Loaded) -> None:
    assert loaded.summary.status == "duration reached"


def _check_lossy(loaded: Loaded) -> None:
    assert loaded.summary.lost_events > 0, loaded.stdout


CHECKS = {
    "full": _check_full,
    "tokens": _check_gated,
    "sample": _check_gated,
    "ops": _check_ops,
    "aggregate": _check_aggregate,
    "no-barriers": _check_no_barriers,
    "sample-detach": _check_gated,
    "json": _check_json,
    "cut-short": _check_cut_short,
    "lossy": _check_lossy,
}


def test_every_kind_has_its_check() -> None:
    assert set(CHECKS) == {k.name for k in KINDS}
