"""A libggml-cpu with one op class slowed by a set fraction: the real slowdown the gate must catch.

The gate's power is how often it catches a change that makes one kind of op slower by 5 or 10 %.
Model variants (a tensor type made heavier) move more than the op they change (memory traffic
slows the ops beside it), so this build slows exactly one: each thread times its part of every
node whose name starts with $GGML_SLOW_NAME and then spins for $GGML_SLOW_PERCENT % of that time,
inside the node (before its barrier), as a slower kernel would. Without those variables the
library runs as built by setup.sh.

It is the pinned llama.cpp's source with that one change, of which only libggml-cpu is built
(into LLAMA_DIR/build-slowed/bin); a command of the shared build gets it by LD_LIBRARY_PATH,
which comes before the tools' RUNPATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from scripts import assets

BUILD = assets.LLAMA_DIR / "build-slowed"
LIB = BUILD / "bin"
CALL = "            ggml_compute_forward(&params, node);\n"
SLOWED_CALL = """            const bool slowed = ggml_slowed(node);
            const int64_t t0 = slowed ? slow_now() : 0;
            ggml_compute_forward(&params, node);
            if (slowed) {
                const int64_t until = t0 + (slow_now() - t0) * (100 + slow_percent) / 100;
                while (slow_now() < until) {}
            }
"""
LOOP = "static thread_ret_t ggml_graph_compute_thread(void * data) {\n"
SLOWED = """static int slow_percent = -1;
static const char * slow_name;

static int64_t slow_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool ggml_slowed(const struct ggml_tensor * node) {
    if (slow_percent < 0) {
        const char * percent = getenv("GGML_SLOW_PERCENT");
        slow_name = getenv("GGML_SLOW_NAME");
        slow_percent = percent && slow_name ? atoi(percent) : 0;
    }
    return slow_percent > 0 && strncmp(node->name, slow_name, strlen(slow_name)) == 0;
}

"""


def _patched(source: str) -> str:
    for anchor in (CALL, LOOP):
        if source.count(anchor) != 1:
            raise RuntimeError(f"ggml-cpu.c has not exactly one {anchor.strip()!r}")
    return source.replace(CALL, SLOWED_CALL).replace(LOOP, SLOWED + LOOP)


def _shared_flags() -> list[str]:
    """The compiler flags setup.sh built the shared build with (its CMake cache), as -D options:
    the library it stands in for is built alike."""
    cache = (assets.LLAMA_DIR / "build-shared" / "CMakeCache.txt").read_text().splitlines()
    return [f"-D{name}={line.split('=', 1)[1]}" for line in cache
            for name in ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS") if line.startswith(f"{name}:")]


def build() -> Path:
    """The folder holding the slowed libggml-cpu (built once; minutes)."""
    done = BUILD / ".complete"
    if done.is_file():
        return LIB
    shutil.rmtree(BUILD, ignore_errors=True)
    src = BUILD / "src"
    shutil.copytree(assets.LLAMA_DIR / "src", src, ignore=shutil.ignore_patterns("models", "docs"))
    cpu = src / "ggml" / "src" / "ggml-cpu" / "ggml-cpu.c"
    cpu.write_text(_patched(cpu.read_text()))
    log = BUILD / "build.log"
    with log.open("w") as out:
        subprocess.run(["cmake", "-S", str(src), "-B", str(BUILD), "-DCMAKE_BUILD_TYPE=Release",
                        "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF",
                        "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                        "-DLLAMA_BUILD_SERVER=OFF", *_shared_flags()],
                       check=True, stdout=out, stderr=out)
        subprocess.run(["cmake", "--build", str(BUILD), "-j", str(os.cpu_count() or 1),
                        "--target", "ggml-cpu"], check=True, stdout=out, stderr=out)
    done.touch()
    return LIB


def slowed_env(name: str, percent: int) -> dict[str, str]:
    """The environment that runs a command of the shared build with `name`'s nodes slowed."""
    return {**os.environ, "LD_LIBRARY_PATH": str(build()), "GGML_SLOW_NAME": name,
            "GGML_SLOW_PERCENT": str(percent)}


if __name__ == "__main__":
    print(build())
