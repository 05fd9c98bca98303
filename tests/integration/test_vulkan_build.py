"""The Vulkan build (setup.sh's build-vulkan), run on this machine's Vulkan device (Mesa's
lavapipe where there is no GPU), and the oracles a trace of it is held against
(vulkan_oracle): what the scheduler assigned to the device, what bpftrace counts."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from scripts import assets
from tests.integration.vulkan_oracle import PROMPT, completion, sched_splits, vulkan_counts

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not (assets.bin_dir("vulkan").parent / ".complete").is_file(),
                       reason="the Vulkan build is not made: scripts/setup.sh makes it"),
]

MODELS = ("gemma-3-270m", "tiny-qwen3moe")



def test_the_device_completes_the_prompt_as_the_cpu_does() -> None:
    # Verbosity 4: llama.cpp's model loading says how many layers went to the device.
    env = {**os.environ, **assets.vulkan_env(), "LLAMA_ARG_LOG_VERBOSITY": "4"}
    runs = {layers: subprocess.run(completion("gemma-3-270m", layers, 8), capture_output=True,
                                   text=True, env=env, stdin=subprocess.DEVNULL, timeout=600,
                                   check=False)
            for layers in (0, 99)}
    for run in runs.values():
        assert run.returncode == 0, run.stderr[-2000:]
    # Every layer went to the device (ggml-vulkan found it), and its text is the CPU's.
    assert re.search(r"offloaded (\d+)/\1 layers to GPU", runs[99].stderr), runs[99].stderr
    assert runs[99].stdout == runs[0].stdout and runs[0].stdout.startswith(PROMPT)


@pytest.mark.parametrize("name", MODELS)
def test_the_scheduler_splits_each_token_step_between_the_device_and_the_cpu(name: str) -> None:
    graphs = sched_splits(completion(name, 99, 4), assets.vulkan_env())
    # The prompt's graph and one graph per token decoded after it.
    assert len(graphs) == 4
    for graph in graphs:
        backends = {s.backend for s in graph.splits}
        assert backends == {"Vulkan0", "CPU"}, backends
        assert all(s.nodes for s in graph.splits if s.backend == "Vulkan0")


@pytest.mark.parametrize("name", MODELS[1:])
def test_bpftrace_counts_the_device_s_work_per_token(name: str) -> None:
    """Counted in a run of 5 tokens less one of 1: 4 token steps, without the model's load and
    the prompt's step (of the MoE model, whose splits the dense one's are a case of: the
    oracle holds the Gemma capture of test_vulkan_capture too)."""
    env = assets.vulkan_env()
    short, long = (vulkan_counts(completion(name, 99, n), env) for n in (1, 5))
    per_token = {k: (long[k] - short[k]) / 4 for k in long}
    graph = sched_splits(completion(name, 99, 2), env)[-1]
    device = [s for s in graph.splits if s.backend == "Vulkan0"]
    # The scheduler hands each split to its backend once; the Vulkan backend computes its own.
    assert per_token["backend_graph_compute_async"] == len(graph.splits)
    assert per_token["graph_compute"] == len(device) == 1
    # It copies each split's inputs in once: to the device, queued (cpy_tensor_async) or
    # through the buffer (set_tensor: the inputs llama.cpp sets); from it through the buffer.
    copies = sum(per_token[k] for k in ("buffer_set_tensor", "buffer_get_tensor",
                                        "cpy_tensor_async"))
    assert copies == sum(s.inputs for s in graph.splits)
    # The graph compute records its nodes, dispatches them, submits them and waits for the
    # device at least once (before the result is read).
    assert per_token["build_graph"] > 0 and per_token["dispatch"] > 0
    assert per_token["submit"] > 0 and per_token["wait_for_fence"] >= 1
