"""record --gpu-timestamps on the Vulkan build (setup.sh's build-vulkan), with real probes on
this machine's Vulkan device (Mesa's lavapipe where there is no GPU): each op the backend
timed has its device time on the device's track, held against what the backend's own logger
prints of the same timestamps; and the option's bad input."""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.capture.recorder import GPU_TIMESTAMPS_NOTE
from profinfer_perfetto.model.backends import VULKAN_NAME
from profinfer_perfetto.model.names import DEVICE_TIME_ARG, RECORD_SLICE, graph_slice
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.conftest import VulkanRun
from tests.integration.test_bad_input import one_sentence
from tests.integration.vulkan_oracle import completion

VULKAN_BUILT = (assets.bin_dir("vulkan").parent / ".complete").is_file()
TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
# The logger's printout after each split: a line per op kind, "NAME: COUNT x MEAN us = SUM
# us", then "Total time: SUM us." (C++ streams: six significant digits).
_KIND = re.compile(r"^.*: (\d+) x \S+ us = \S+ us")
_TOTAL = re.compile(r"^Total time: (\S+) us\.$")


def _logged(stderr: str) -> list[tuple[int, float]]:
    """Each split's ops timed and their summed device time in µs, as GGML_VK_PERF_LOGGER
    prints them (from the same timestamps the probes read)."""
    splits, count = [], 0
    for line in stderr.splitlines():
        if kind := _KIND.match(line):
            count += int(kind[1])
        elif total := _TOTAL.match(line):
            splits.append((count, float(total[1])))
            count = 0
    return splits


@pytest.mark.root
@pytest.mark.skipif(not VULKAN_BUILT, reason="the Vulkan build is not made: scripts/setup.sh "
                    "makes it")
def test_each_timed_op_has_its_device_time_within_its_split(gemma_on_vulkan: VulkanRun
                                                            ) -> None:
    out, result = gemma_on_vulkan.trace, gemma_on_vulkan.result
    assert result.returncode == 0, result.stderr
    logged = _logged(result.stderr)
    trace = trace_reader.read(out)
    (rec,) = [s for s in trace.slices if s.name == RECORD_SLICE]
    assert rec.args["events_lost"] == 0
    # The recording says where the times come from, and what they cost.
    assert GPU_TIMESTAMPS_NOTE in rec.args.values()
    graphs = sorted((s for s in trace.slices if s.name == graph_slice(VULKAN_NAME)),
                    key=lambda s: s.ts)
    device = [s for s in trace.slices if trace.track_name(s.track) == VULKAN_NAME]
    assert len(graphs) == len(logged) == 3  # the prompt's step, then 2 decode steps
    assert sum(n for n, _ in logged) == len(device)
    for graph, (count, total_us) in zip(graphs, logged, strict=True):
        # The split's device slices lie within it: its work was recorded after it began and
        # read back before it returned, so the device's time for it cannot be longer.
        mine = sorted((s for s in device if graph.ts <= s.ts and s.end <= graph.end),
                      key=lambda s: s.ts)
        assert len(mine) == count > 0
        assert all(s.end > s.ts and DEVICE_TIME_ARG[0] in s.args for s in mine)
        # Back to back, the same times the backend's logger sums (to its six digits).
        assert all(a.end == b.ts for a, b in itertools.pairwise(mine))
        assert math.isclose(sum(s.end - s.ts for s in mine) / 1000, total_us, rel_tol=1e-5)
        # Each is named as an op the split recorded.
        ops = {s.name for s in trace.slices if s.parent is graph}
        assert {s.name for s in mine} <= ops
    if TP_BIN:
        with TraceQuery(out, EngineChoice("trace_processor")) as q:
            (row,) = q.sql("SELECT COUNT(*) FROM slice s JOIN track t ON s.track_id = t.id "
                           f"WHERE t.name = '{VULKAN_NAME}'").rows
        assert row[0] == len(device)


def test_gpu_timestamps_on_a_running_process(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "x.pftrace"
    result = cli("record", "--gpu-timestamps", "--pid", str(os.getpid()), "-o", out)
    assert result.returncode == 2
    one_sentence(result.stderr, "--gpu-timestamps needs a command to launch")
    assert not out.exists()


def test_gpu_timestamps_without_a_vulkan_backend(cli: Cli, llama: Callable[..., Path],
                                                 model: Callable[[str], Path],
                                                 tmp_path: Path) -> None:
    out = tmp_path / "x.pftrace"
    result = cli("record", "--gpu-timestamps", "-o", out, "--", llama("llama-completion"), "-m",
                 model("tiny-llama"), "-n", "2")
    assert result.returncode == 2
    one_sentence(result.stderr, "this command has no such backend")
    assert not out.exists()


def test_gpu_timestamps_where_no_device_ran(cli: Cli, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The Vulkan build on a machine whose only device ggml-vulkan skips unless told (Mesa's
    lavapipe is a CPU-type device): the run falls back to the CPU, whole, and the trace is
    kept, but the times asked for are not in it: one sentence, exit 2."""
    env = assets.vulkan_env()
    monkeypatch.setenv("MESA_SHADER_CACHE_DIR", env["MESA_SHADER_CACHE_DIR"])
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)
    out = tmp_path / "cpu.pftrace"
    result = cli("record", "--gpu-timestamps", "-o", out, "--", *completion("gemma-3-270m", 99, 2))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    # The target's own output is on stderr too: the sentence is the last line.
    assert "--gpu-timestamps: no op ran on a Vulkan device" in result.stderr.splitlines()[-1]
    assert "no usable GPU found" in result.stderr  # llama.cpp's own word for it
    assert trace_reader.read(out).slices
