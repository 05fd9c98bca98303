"""Where the Vulkan backend's probes go: every function of target.VULKAN_SYMBOLS, entry and
return, in a stand-in libggml-vulkan (C functions under the C++ names gcc gives them); none,
and one note, where one of them is not there (another version)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from profinfer_perfetto.analysis.target import VULKAN_SYMBOLS, plan_probes
from tests.unit.test_architectures import build

GRAPH_NODE = """struct ggml_cgraph { int size; int n_leafs; int n_nodes; void **nodes; };
void *ggml_graph_node(struct ggml_cgraph *g, int i) { return g->nodes[i < 0 ? g->n_nodes + i : i]; }
"""
"""ggml_graph_node for tests/fixtures/fake_ggml.c's ggml_cgraph, with a nodes array after it."""


def _fake_vulkan(tmp_path: Path, symbols: list[str]) -> Path:
    """A shared library defining `symbols` as functions (each does a little, so has a size),
    and ggml_graph_node (which says where the fake ggml's graphs keep their nodes)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed (scripts/setup.sh installs it)")
    source = tmp_path / "fake_vulkan.c"
    source.write_text(GRAPH_NODE + "".join(f"int {s}(int a) {{ return a * 3 + 1; }}\n"
                                           for s in symbols))
    lib = tmp_path / "libggml-vulkan.so"
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-o", str(lib), str(source)], check=True)
    return lib


def test_each_vulkan_function_gets_an_entry_and_a_return_probe(tmp_path: Path) -> None:
    ggml = build(tmp_path, "gcc-x86-64")
    before = plan_probes([ggml])
    plan = plan_probes([ggml, _fake_vulkan(tmp_path, [s for _, s in VULKAN_SYMBOLS])])
    vk = sorted((p.fn, p.where, p.ret) for p in plan.probes if p.fn.startswith("vk_"))
    assert vk == sorted((f"{stem}_{end}", symbol, end == "end")
                        for stem, symbol in VULKAN_SYMBOLS for end in ("begin", "end"))
    assert plan.traces_vulkan and plan.notes == before.notes
    # Without libggml-vulkan, nothing changes.
    assert not before.traces_vulkan and set(before.probes) == set(plan.probes) - {
        p for p in plan.probes if p.fn.startswith("vk_")}


def test_a_missing_vulkan_function_leaves_the_backend_untraced_with_a_note(
        tmp_path: Path) -> None:
    ggml = build(tmp_path, "gcc-x86-64")
    before = plan_probes([ggml])
    plan = plan_probes([ggml, _fake_vulkan(tmp_path, [s for _, s in VULKAN_SYMBOLS[:-1]])])
    assert plan.probes == before.probes
    (note,) = set(plan.notes) - set(before.notes)
    assert note.startswith("the Vulkan backend's graphs are not traced: libggml-vulkan.so has "
                           f"no {VULKAN_SYMBOLS[-1][1]}")

