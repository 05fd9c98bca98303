"""`dag` and `plot`: pictures of the golden recording (tiny-qwen3moe), tested for what they show
(the graph's nodes and edges, fills that follow times, a figure's points, cells and bars against
the rows they come from), on both engines; bad input in one sentence."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from profinfer_perfetto.draw.dag import (
    INPUT_FILL,
    DagInput,
    Fill,
    fill_colour,
    fill_levels,
    pick_graph,
    read_dag,
    to_dot,
)
from profinfer_perfetto.encode.perfetto import write_perfetto
from profinfer_perfetto.model.layout import build_layout
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from tests import synthetic
from tests.conftest import Cli
from tests.unit.test_split_flows import split_run

TRACE = Path(__file__).resolve().parents[1] / "golden" / "query" / "tiny-qwen3moe.pftrace"
ENGINES = (["trace_processor"] if os.environ.get("PROFINFER_TP_BIN") else []) + ["builtin"]
SVG = "{http://www.w3.org/2000/svg}"


def _svg(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    return root


def _by_id(root: ET.Element, prefix: str) -> dict[str, ET.Element]:
    return {e.get("id", ""): e for e in root.iter() if e.get("id", "").startswith(prefix)}


def _fill(element: ET.Element) -> str:
    """The fill colour of a matplotlib patch (in its style) or a graphviz shape."""
    for e in element.iter():
        style = re.search(r"fill: (#[0-9a-f]{6})", e.get("style", ""))
        if style:
            return style.group(1)
        if re.fullmatch(r"#[0-9a-f]{6}", e.get("fill", "")):
            return e.get("fill", "")
    raise AssertionError(f"no fill in {element.get('id')}")


def _luminance(colour: str) -> float:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@pytest.mark.parametrize("engine", ENGINES)
def test_the_dag_draws_every_node_and_edge_filled_by_its_time(cli: Cli, tmp_path: Path,
                                                              engine: str) -> None:
    out = tmp_path / "dag.svg"
    result = cli("dag", TRACE, "-o", out, "--engine", engine)
    assert result.returncode == 0, result.stderr
    with TraceQuery(TRACE, EngineChoice(engine)) as q:
        graph = q.sql("select min(graph) from profinfer_graph where phase = 'decode'").rows[0][0]
        times = dict(q.sql(f"select node, dur from profinfer_node where graph = {graph}").rows)
        (edges,), = q.sql(
            "select count(*) from (select distinct o.node, i.node from flow f "
            "join profinfer_op_times o on o.slice_id = f.slice_out "
            f"join profinfer_op_times i on i.slice_id = f.slice_in where o.graph = {graph})").rows
    root = _svg(out)
    groups = [g for g in root.iter(f"{SVG}g")]
    nodes = {g.findtext(f"{SVG}title"): g for g in groups if g.get("class") == "node"}
    assert set(nodes) == {f"n{n}" for n in times}
    assert sum(g.get("class") == "edge" for g in groups) == edges > 0
    # The fill darkens as the time grows; the slowest node is full red.
    by_time = sorted(times, key=lambda n: times[n])
    lum = [_luminance(_fill(nodes[f"n{n}"])) for n in by_time]
    assert lum == sorted(lum, reverse=True)
    assert _fill(nodes[f"n{by_time[-1]}"]) == "#ff0000"
    assert _fill(nodes[f"n{by_time[0]}"]) == "#ffffff"
    layers = {g.findtext(f"{SVG}title") for g in groups if g.get("class") == "cluster"}
    assert layers == {"cluster_layer_0", "cluster_layer_1"}


def test_the_dag_as_dot_and_by_bandwidth() -> None:
    with TraceQuery(TRACE, EngineChoice("builtin")) as q:
        dag = read_dag(q, pick_graph(q, 0))
    assert dag.phase == "prefill" and dag.step == 0
    text = to_dot(dag, Fill.BANDWIDTH)
    assert text.count(" -> ") == len(dag.edges)
    fastest = max(dag.nodes, key=lambda n: n.value(Fill.BANDWIDTH))
    assert f'n{fastest.node} [label="' in text
    assert f'fillcolor="{fill_colour(1.0)}"' in text.split(f"n{fastest.node} [", 1)[1]
    assert fill_colour(0.0) == "#ffffff" and fill_colour(2.0) == "#ff0000"
    # Node times span decades: the fill follows their logarithm.
    assert fill_levels([10.0, 100.0, 1000.0, 0.0]) == [0.0, 0.5, 1.0, 0.0]
    assert fill_levels([5.0, 5.0]) == [1.0, 1.0] and fill_levels([0.0]) == [0.0]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_split_s_dag_shows_the_nodes_of_other_splits_that_fed_it(tmp_path: Path,
                                                                   engine: str) -> None:
    """A Vulkan run's steps cut into splits (CPU, Vulkan0, CPU; tests/unit/test_split_flows):
    by default the first decode step's largest split, the device's; the nodes of the other
    splits that fed it in boxes named by their backend."""
    trace = tmp_path / "split.pftrace"
    with trace.open("wb") as f:
        write_perfetto(build_layout(build(split_run(2, 1))), f)
    with TraceQuery(trace, EngineChoice(engine)) as q:
        vulkan, output = read_dag(q, pick_graph(q, None)), read_dag(q, 5)
    assert (vulkan.graph, vulkan.backend, vulkan.phase, len(vulkan.nodes)) == (
        4, "Vulkan0", "decode", 3)
    assert vulkan.inputs == [DagInput(3, "CPU", 0, "MUL_MAT", "embd", 0)]
    (into_output,) = output.inputs
    assert (output.backend, into_output.backend, into_output.tensor) == (
        "CPU", "Vulkan0", "result_norm")
    text = to_dot(vulkan)
    assert 'label="graph 4 (Vulkan0), decode step 1' in text
    assert 'label="graph 3 (CPU)"' in text and "g3n0 -> n0;" in text
    assert f'g3n0 [label="MUL_MAT\\nembd", fillcolor="{INPUT_FILL}"' in text


@pytest.mark.parametrize("engine", ENGINES)
def test_the_figures_show_the_metric_rows(cli: Cli, tmp_path: Path, engine: str) -> None:
    with TraceQuery(TRACE, EngineChoice(engine)) as q:
        kv_points = q.sql("select op, role, count(*) from profinfer_kv_point "
                          "group by op, role").rows
        experts = q.metric("moe_experts")
        steps = q.metric("token_steps").rows
        roofline = q.metric("roofline")
    figures = {}
    for name in ("kv_growth", "moe_experts", "token_latency", "op_cost", "roofline"):
        out = tmp_path / f"{name}.svg"
        result = cli("plot", TRACE, name, "-o", out, "--engine", engine)
        assert result.returncode == 0, result.stderr
        figures[name] = _svg(out)

    points = _by_id(figures["kv_growth"], "points_")
    for op, role, count in kv_points:
        drawn = points[f"points_{op.replace('_', '-')}_{role.replace('_', '-')}"]
        assert len(list(drawn.iter(f"{SVG}use"))) == count

    cols = experts.columns
    decode = [dict(zip(cols, r, strict=True)) for r in experts.rows if r[0] == "decode"]
    cells = _by_id(figures["moe_experts"], "cell_")
    assert set(cells) == {f"cell_{r['layer']}_{r['expert']}" for r in decode}
    by_share = sorted(decode, key=lambda r: r["token_share"])
    lum = [_luminance(_fill(cells[f"cell_{r['layer']}_{r['expert']}"])) for r in by_share]
    assert lum == sorted(lum, reverse=True)

    bars = _by_id(figures["token_latency"], "bar_")
    counted = {phase: sum(int(i.rsplit("_", 1)[1]) for i in bars if i.startswith(f"bar_{phase}_"))
               for phase in ("prefill", "decode")}
    assert counted == {"prefill": sum(r[1] == "prefill" for r in steps),
                       "decode": sum(r[1] == "decode" for r in steps)}
    assert _by_id(figures["op_cost"], "points_MUL-MAT-ID")

    verdict = roofline.columns.index("verdict")
    by_verdict = _by_id(figures["roofline"], "points_")
    assert {v: len(list(g.iter(f"{SVG}use"))) for v, g in by_verdict.items()} == {
        f"points_{v}": sum(r[verdict] == v for r in roofline.rows)
        for v in {r[verdict] for r in roofline.rows}}
    assert _by_id(figures["roofline"], "roof_2_")


def test_pictures_refuse_bad_input_in_one_sentence(cli: Cli, tmp_path: Path) -> None:
    dense = tmp_path / "dense.pftrace"
    with dense.open("wb") as f:
        write_perfetto(build_layout(build(synthetic.decode_run(1, steps=3))), f)
    for args, said in [
        (("dag", TRACE, "-o", tmp_path / "x.png"), "give an output ending in .svg"),
        (("dag", TRACE, "-o", tmp_path / "x.svg", "--graph", "99"), "has no graph 99"),
        (("dag", TRACE, "-o", tmp_path / "x.svg", "--fill", "colour"), "unknown --fill"),
        (("plot", TRACE, "nope", "-o", tmp_path / "x.svg"), "no figure 'nope'"),
        (("plot", dense, "moe_experts", "-o", tmp_path / "x.svg"), "no Mixture-of-Experts"),
        (("plot", dense, "kv_growth", "-o", tmp_path / "x.svg"), "no attention ops"),
        (("dag", tmp_path / "missing.pftrace", "-o", tmp_path / "x.svg"), "missing.pftrace"),
    ]:
        result = cli(*args, "--engine", "builtin")
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (args, result.stderr)
        assert not (tmp_path / "x.svg").exists()
