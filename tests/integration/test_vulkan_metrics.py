"""backend_split across runs on the Vulkan build (setup.sh's build-vulkan), with real probes:
Gemma-3-270M recorded at -ngl 0 (the CPU computes every node) and, with --gpu-timestamps, at
-ngl 99 (Vulkan0 computes all but the first and last), then `query 'DIR/*.pftrace'` over both:
the same matmul weights on both backends, the GPU's with its device time, the copies of the
token steps charged to Vulkan0; both engines answer the same."""

from __future__ import annotations

import csv
import io
import os
import shutil
from pathlib import Path

import pytest

from profinfer_perfetto.model.backends import VULKAN_NAME
from profinfer_perfetto.model.names import COPY_ARGS, PHASES
from scripts import assets
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.conftest import VulkanRun
from tests.integration.vulkan_oracle import completion

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(not (assets.bin_dir("vulkan").parent / ".complete").is_file(),
                       reason="the Vulkan build is not made: scripts/setup.sh makes it"),
]

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
ENGINES = ("builtin", "trace_processor") if TP_BIN else ("builtin",)




def _step_copy_bytes(path: Path) -> int:
    """The bytes of the copies that lie within the run's token steps."""
    trace = trace_reader.read(path)
    steps = [s for s in trace.slices if s.name in PHASES]
    return sum(s.args[COPY_ARGS[0]] for s in trace.slices if COPY_ARGS[0] in s.args
               and any(t.ts <= s.ts < t.end for t in steps))


def test_backend_split_compares_the_cpu_and_the_gpu_across_runs(
        cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        gemma_on_vulkan: VulkanRun) -> None:
    for name, value in assets.vulkan_env().items():
        monkeypatch.setenv(name, value)
    cpu, gpu = tmp_path / "ngl0.pftrace", tmp_path / "ngl99.pftrace"
    # -ngl 0 (the CPU computes every node: no --gpu-timestamps, which would have nothing to
    # time and exit 2) beside the shared -ngl 99 run, its ops timed on the device.
    result = cli("record", "-o", cpu, "--", *completion("gemma-3-270m", 0, 3))
    assert result.returncode == 0, result.stderr
    assert gemma_on_vulkan.result.returncode == 0, gemma_on_vulkan.result.stderr
    shutil.copyfile(gemma_on_vulkan.trace, gpu)
    answers = []
    for engine in ENGINES:
        result = cli("query", f"{tmp_path}/*.pftrace", "backend_split", "--format", "csv",
                     "--engine", engine)
        assert result.returncode == 0, result.stderr
        answers.append(result.stdout)
    assert all(a == answers[0] for a in answers), "the engines disagree"
    rows = list(csv.DictReader(io.StringIO(answers[0])))
    by: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rows:
        by.setdefault((r["trace"], r["backend"]), []).append(r)
    on_cpu, on_gpu = by[(str(cpu), "CPU")], by[(str(gpu), VULKAN_NAME)]
    assert (str(cpu), VULKAN_NAME) not in by  # -ngl 0: nothing on the device
    # The same matmul weights on both backends, as many nodes of each (the same graphs),
    # the GPU's timed by the device, the CPU's by the host.
    key = ("phase", "op", "role", "weights")
    cpu_mm = {tuple(r[k] for k in key): r for r in on_cpu if r["op"] == "MUL_MAT"}
    gpu_mm = {tuple(r[k] for k in key): r for r in on_gpu if r["op"] == "MUL_MAT"}
    assert gpu_mm and set(gpu_mm) <= set(cpu_mm)
    for k, g in gpu_mm.items():
        assert g["count"] == cpu_mm[k]["count"], k
        assert (g["time_from"], cpu_mm[k]["time_from"]) == ("device", "host"), k
        assert float(g["gflop_per_s"]) > 0 and float(cpu_mm[k]["gflop_per_s"]) > 0, k
    # The copies within the token steps are charged to Vulkan0 (rounded row by row), none to
    # the CPU of either run.
    charged = sum(int(r["copy_bytes"]) for r in on_gpu)
    assert _step_copy_bytes(gpu) > 0
    assert abs(charged - _step_copy_bytes(gpu)) <= len(on_gpu)
    assert all(int(r["copy_bytes"]) == 0 for r in rows if r["backend"] == "CPU")
