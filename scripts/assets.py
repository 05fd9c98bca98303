"""Where setup puts the llama.cpp build and the models: the one place tests, benchmarks and
scripts get their paths from.

    python scripts/assets.py            # NAME=path lines, for a shell: eval "$(...)"
    python scripts/assets.py MODEL_TINY_LLAMA

Everything lives under $PROFINFER_CACHE (default /var/cache/profinfer-perfetto), outside the
clone, so a fresh clone reuses a finished build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CACHE = Path(os.environ.get("PROFINFER_CACHE", "/var/cache/profinfer-perfetto"))
LLAMA_DIR = CACHE / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"
MODELS = CACHE / "models"


def bin_dir(build: str = "shared") -> Path:
    """The tools of a build: "shared" (libggml-*.so beside them) or "static" (one executable)."""
    return LLAMA_DIR / f"build-{build}" / "bin"


def llama_bin(tool: str, build: str = "shared") -> Path:
    """A llama.cpp tool: llama-completion, llama-cli, llama-bench or llama-server."""
    return bin_dir(build) / tool


def model(name: str) -> Path:
    """tiny-llama, tiny-qwen3moe, tiny-mixtral, medium-llama, medium-qwen3moe, gemma-3-270m."""
    file = "gemma-3-270m-q4_k_m.gguf" if name == "gemma-3-270m" else f"{name}.gguf"
    return MODELS / file


def variables() -> dict[str, Path | str]:
    out: dict[str, Path | str] = {
        "LLAMA_CPP_PYTHON_VERSION": LLAMA_CPP_PYTHON_VERSION,
        "PROFINFER_CACHE": CACHE,
        "LLAMA_DIR": LLAMA_DIR,
        "MODELS": MODELS,
    }
    for build in ("shared", "static"):
        out[f"LLAMA_{build.upper()}_BIN"] = bin_dir(build)
    for name in ("tiny-llama", "tiny-qwen3moe", "tiny-mixtral", "medium-llama",
                 "medium-qwen3moe", "gemma-3-270m"):
        out["MODEL_" + name.upper().replace("-", "_")] = model(name)
    return out


if __name__ == "__main__":
    found = variables()
    if len(sys.argv) > 1:
        print(found[sys.argv[1]])
    else:
        print("\n".join(f"{k}={v}" for k, v in found.items()))
