"""Fixtures of the integration tests: the Vulkan recording their tests share."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts import assets
from tests.conftest import run_cli
from tests.integration.vulkan_oracle import completion

VULKAN_BUILT = (assets.bin_dir("vulkan").parent / ".complete").is_file()


@dataclass(frozen=True)
class VulkanRun:
    """A recording made with real probes on the Vulkan build, and what the recorder printed."""

    trace: Path
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="session")
def gemma_on_vulkan(tmp_path_factory: pytest.TempPathFactory) -> VulkanRun:
    """Gemma-3-270M at -ngl 99, 3 tokens (the prompt's step, then 2 decode steps), recorded
    with --gpu-timestamps: one recording for the tests that read one (each Vulkan process
    spends some 9 s setting up its pipelines here, even with Mesa's cache)."""
    if not VULKAN_BUILT:
        pytest.skip("the Vulkan build is not made: scripts/setup.sh makes it")
    out = tmp_path_factory.mktemp("vulkan") / "ngl99.pftrace"
    with pytest.MonkeyPatch.context() as patch:
        for name, value in assets.vulkan_env().items():
            patch.setenv(name, value)
        result = run_cli("record", "--gpu-timestamps", "-o", out, "--",
                         *completion("gemma-3-270m", 99, 3))
    return VulkanRun(out, result)
