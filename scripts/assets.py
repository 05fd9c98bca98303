"""Where setup puts the llama.cpp build and the models: the one place tests, benchmarks and
scripts get their paths from.

    python scripts/assets.py            # NAME=value lines, for a shell: eval "$(...)"
    python scripts/assets.py MODEL_TINY_LLAMA

Everything lives under $PROFINFER_CACHE (default /var/cache/profinfer-perfetto), outside the
clone, so a fresh clone reuses a finished build.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("PROFINFER_CACHE", "/var/cache/profinfer-perfetto"))
MODELS = CACHE / "models"


@dataclass(frozen=True)
class LlamaVersion:
    """A llama.cpp, as vendored by one llama-cpp-python sdist, built in build-shared/."""

    version: str
    """llama-cpp-python's version: the llama.cpp commit it vendors has no tag of its own."""
    tool: str
    """The tool that completes a prompt (llama-cli until 2025, then llama-completion)."""
    tool_flags: tuple[str, ...]
    """What makes the tool complete the prompt and exit (no conversation mode)."""
    cmake_flags: tuple[str, ...]
    """The options of setup.sh's build that this version's CMakeLists knows."""
    cpu_lib: str
    """libggml-cpu, under build-shared/ (0.3.2 does not put its libraries in bin/)."""
    in_tests: bool
    """Recorded by `nox -s tests`; the others only by `nox -s matrix`."""

    @property
    def dir(self) -> Path:
        return CACHE / f"llama.cpp-{self.version}"

    def tool_path(self) -> Path:
        return self.dir / "build-shared" / "bin" / self.tool

    def cpu_lib_path(self) -> Path:
        return self.dir / "build-shared" / self.cpu_lib

    def is_built(self) -> bool:
        return (self.dir / "build-shared" / ".complete").is_file() and self.tool_path().is_file()


_COMMON = ("-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TESTS=OFF")
VERSIONS = {v.version: v for v in (
    # 2024-11: conversation mode is opt-in (no -no-cnv); LLAMA_CURL defaults to OFF.
    LlamaVersion("0.3.2", "llama-cli", (), (*_COMMON, "-DLLAMA_CURL=OFF"),
                 "ggml/src/ggml-cpu/libggml-cpu.so", in_tests=False),
    # 2025-07: LLAMA_CURL defaults to ON (libcurl is not installed).
    LlamaVersion("0.3.14", "llama-cli", ("-no-cnv",),
                 ("-DLLAMA_BUILD_TOOLS=ON", *_COMMON, "-DLLAMA_CURL=OFF"),
                 "bin/libggml-cpu.so", in_tests=True),
    # 2026-03: llama-cli became a chat client of the server; llama-completion completes.
    LlamaVersion("0.3.19", "llama-completion", ("-no-cnv",),
                 ("-DLLAMA_BUILD_TOOLS=ON", *_COMMON, "-DLLAMA_OPENSSL=OFF"),
                 "bin/libggml-cpu.so.0", in_tests=False),
    LlamaVersion("0.3.36", "llama-completion", ("-no-cnv",),
                 ("-DLLAMA_BUILD_TOOLS=ON", *_COMMON, "-DLLAMA_USE_PREBUILT_UI=OFF",
                  "-DLLAVA_BUILD=OFF", "-DLLAMA_OPENSSL=OFF"),
                 "bin/libggml-cpu.so.0", in_tests=True),
)}
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
"""The build everything but the version matrix uses (shared and static)."""
OLD_VERSION = "0.3.14"
"""The older build setup.sh makes too (about 2.5 min on two CPUs)."""
LLAMA_DIR = VERSIONS[LLAMA_CPP_PYTHON_VERSION].dir


BINDINGS = CACHE / f"bindings-{LLAMA_CPP_PYTHON_VERSION}"
"""A venv with llama-cpp-python's wheel, built from the same sdist: llama.cpp loaded by Python."""


def bindings_python() -> Path:
    return BINDINGS / "bin" / "python"


BLAS_CMAKE_FLAGS = ("-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS")
"""The "blas" build: the shared build with ggml's BLAS backend, on Debian's OpenBLAS."""


ARM64_CMAKE_FLAGS = (
    # The toolchain: Debian's cross compilers (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu),
    # libraries and headers from /usr/aarch64-linux-gnu only, programs from the host.
    "-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
    "-DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc", "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++",
    "-DCMAKE_FIND_ROOT_PATH=/usr/aarch64-linux-gnu", "-DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER",
    "-DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY", "-DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY",
    "-DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY",
    # An RK3588's CPU (Cortex-A76/A55): ggml's CPU backend built for armv8.2-a with dotprod.
    "-DGGML_NATIVE=OFF", "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod")
"""The "arm64" and "arm64-bti" builds: shared (OpenMP, libggml-cpu.so in bin/), cross-compiled
for linux/aarch64, for reading aarch64 code here (they do not run on this machine)."""
ARM64_BTI_FLAGS = "-mbranch-protection=standard"
"""The "arm64-bti" build's CFLAGS and CXXFLAGS: every function starts with `bti c` or
`paciasp`, as distributions build arm64 code (BTI and PAC)."""
X86_64_V3_CMAKE_FLAGS = (
    "-DGGML_NATIVE=OFF", "-DGGML_SSE42=ON", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_BMI2=ON",
    "-DGGML_FMA=ON", "-DGGML_F16C=ON")
"""ggml's CPU backend for x86-64-v3 (AVX2, no AVX-512), not for this machine's CPU."""
CLANG_CMAKE_FLAGS = (
    "-DCMAKE_C_COMPILER=clang", "-DCMAKE_CXX_COMPILER=clang++", "-DGGML_BACKEND_DL=ON",
    # GGML_BACKEND_DL refuses GGML_NATIVE on x86 (its CPU backend checks the CPU's features at
    # load time), and GGML_CPU_ALL_VARIANTS builds a dozen CPU backends: one, for x86-64-v3.
    *X86_64_V3_CMAKE_FLAGS,
    # Debian's clang has no OpenMP runtime without libomp-dev: ggml's own threads, always.
    "-DGGML_OPENMP=OFF")
"""The "clang" build: shared, made by Debian's clang, with the CPU backend a module
(bin/libggml-cpu.so) that ggml dlopens at run time (GGML_BACKEND_DL), without OpenMP."""


VULKAN_CMAKE_FLAGS = ("-DGGML_VULKAN=ON",)
"""The "vulkan" build: the shared build with ggml's Vulkan backend (setup.sh adds the headers)."""
VULKAN_HEADERS = CACHE / "vulkan-headers"
"""Trixie's Vulkan headers (scripts/vulkan_headers.sh): bookworm's are too old for ggml-vulkan."""


def vulkan_env() -> dict[str, str]:
    """What a run of the "vulkan" build needs here, beside os.environ: ggml-vulkan skips
    CPU-type devices such as Mesa's lavapipe (the only Vulkan device of a machine without a
    GPU) unless GGML_VK_VISIBLE_DEVICES names them, and Mesa keeps the compiled pipelines in
    MESA_SHADER_CACHE_DIR, so only the first run ever pays for compiling them (about 40 s)."""
    return {"GGML_VK_VISIBLE_DEVICES": "0", "MESA_SHADER_CACHE_DIR": str(CACHE / "mesa-cache")}


OTHER_BUILDS = ("arm64", "arm64-bti", "clang")
"""The builds of another compiler or architecture than the gcc x86-64 ones: the same source."""


def bin_dir(build: str = "shared") -> Path:
    """The tools of a build: "shared" (libggml-*.so beside them), "static" (one executable),
    "blas" (shared, with the BLAS backend), "arm64" and "arm64-bti" (shared, for aarch64),
    "clang" (shared, libggml-cpu.so dlopened), "vulkan" (shared, with the Vulkan backend) or
    "x86-64-v3" (shared, for any AVX2 CPU: what scripts/guest.sh's x86-64 machine runs)."""
    return LLAMA_DIR / f"build-{build}" / "bin"


def llama_bin(tool: str, build: str = "shared") -> Path:
    """A llama.cpp tool: llama-completion, llama-cli, llama-bench or llama-server."""
    return bin_dir(build) / tool


def model(name: str) -> Path:
    """tiny-llama, tiny-qwen3moe, tiny-mixtral, medium-llama, medium-llama-down3,
    medium-qwen3moe, gemma-3-270m."""
    file = "gemma-3-270m-q4_k_m.gguf" if name == "gemma-3-270m" else f"{name}.gguf"
    return MODELS / file


def variables() -> dict[str, Path | str]:
    out: dict[str, Path | str] = {
        "LLAMA_CPP_PYTHON_VERSION": LLAMA_CPP_PYTHON_VERSION,
        "PROFINFER_CACHE": CACHE,
        "LLAMA_DIR": LLAMA_DIR,
        "BINDINGS": BINDINGS,
        "MODELS": MODELS,
        "LLAMA_CMAKE_FLAGS": " ".join(VERSIONS[LLAMA_CPP_PYTHON_VERSION].cmake_flags),
        "LLAMA_BLAS_CMAKE_FLAGS": " ".join(BLAS_CMAKE_FLAGS),
        "LLAMA_ARM64_CMAKE_FLAGS": " ".join(ARM64_CMAKE_FLAGS),
        "LLAMA_ARM64_BTI_FLAGS": ARM64_BTI_FLAGS,
        "LLAMA_CLANG_CMAKE_FLAGS": " ".join(CLANG_CMAKE_FLAGS),
        "LLAMA_X86_64_V3_CMAKE_FLAGS": " ".join(X86_64_V3_CMAKE_FLAGS),
        "LLAMA_VULKAN_CMAKE_FLAGS": " ".join(VULKAN_CMAKE_FLAGS),
        "VULKAN_HEADERS": VULKAN_HEADERS,
        "LLAMA_OLD_VERSION": OLD_VERSION,
        "LLAMA_OLD_DIR": VERSIONS[OLD_VERSION].dir,
        "LLAMA_OLD_TOOL": VERSIONS[OLD_VERSION].tool,
        "LLAMA_OLD_CMAKE_FLAGS": " ".join(VERSIONS[OLD_VERSION].cmake_flags),
    }
    for build in ("shared", "static", "blas", "arm64", "arm64-bti", "clang", "vulkan",
                  "x86-64-v3"):
        out[f"LLAMA_{build.upper().replace('-', '_')}_BIN"] = bin_dir(build)
    for name in ("tiny-llama", "tiny-qwen3moe", "tiny-mixtral", "medium-llama",
                 "medium-qwen3moe", "gemma-3-270m"):
        out["MODEL_" + name.upper().replace("-", "_")] = model(name)
    return out


if __name__ == "__main__":
    found = variables()
    if len(sys.argv) > 1:
        print(found[sys.argv[1]])
    else:
        print("\n".join(f"{k}={shlex.quote(str(v))}" for k, v in found.items()))
