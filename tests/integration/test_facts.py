"""The facts derived from four real llama.cpp builds, from the stripped llama-cpp-python wheels
of two of them, and from the current one cross-compiled for arm64 and built by clang, equal
what compiled offsetof and the builds' own name functions gave (tests/integration/
ggml_builds.py). No probes: no root needed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.ggml import GgmlInfo, read_ggml_info
from scripts.assets import CACHE, LLAMA_CPP_PYTHON_VERSION, OTHER_BUILDS, bin_dir
from tests.integration.ggml_builds import BUILDS, Build

LIBS = ("libggml-base", "libggml-cpu", "libllama")


def _libs(root: Path) -> list[ElfFile]:
    """The libraries of a build, wherever its version put them (0.3.2: src/ and ggml/src/)."""
    found = []
    for name in LIBS:
        paths = [p for p in sorted(root.rglob(f"{name}.so*")) if not p.is_symlink()]
        if not paths:
            pytest.fail(f"{name} is missing under {root}")
        found.append(ElfFile(paths[0]))
    return found


def _assert_facts(info: GgmlInfo, build: Build) -> None:
    assert info.layout == build.layout
    assert info.runtime == build.runtime
    assert info.version == build.version
    assert " ".join(info.ops) == build.ops
    assert " ".join(info.unary_ops) == build.unary_ops
    assert " ".join(info.glu_ops) == build.glu_ops
    types = [f"{n}:{b}/{s}" for n, (b, s) in zip(info.types, info.type_sizes, strict=True)]
    assert ";".join(types) == build.types


@pytest.mark.parametrize("version", sorted(BUILDS))
def test_a_build_s_facts_equal_the_compiled_ones(version: str) -> None:
    root = CACHE / f"llama.cpp-{version}" / "build-shared"
    if not root.is_dir():
        pytest.skip(f"{root} is not built (the version matrix builds it)")
    info = read_ggml_info(_libs(root))
    _assert_facts(info, BUILDS[version])
    assert all("(stripped)" not in s.how for s in info.sources)


@pytest.mark.parametrize("build", OTHER_BUILDS)
def test_other_compilers_and_architectures_give_the_same_facts(build: str) -> None:
    """gcc for arm64 (with and without branch protection) and clang for x86-64, from the same
    source: the same facts as gcc's x86-64 build."""
    root = bin_dir(build).parent
    if not (root / ".complete").is_file():
        pytest.fail(f"{root} is not built: run scripts/setup.sh")
    _assert_facts(read_ggml_info(_libs(root)), BUILDS[LLAMA_CPP_PYTHON_VERSION])


@pytest.mark.parametrize("version", ["0.3.2", "0.3.36"])
def test_a_stripped_wheel_s_facts_equal_the_compiled_ones(version: str,
                                                          tmp_path: Path) -> None:
    wheels = sorted((CACHE / "wheels").glob(f"llama_cpp_python-{version}-*.whl"))
    if not wheels:
        pytest.skip(f"no llama-cpp-python {version} wheel in {CACHE / 'wheels'}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        for name in wheel.namelist():
            if name.startswith("llama_cpp/lib/") and Path(name).name in {
                    f"{lib}.so" for lib in LIBS}:
                wheel.extract(name, tmp_path)
    files = _libs(tmp_path)
    assert not any(f.has_symtab for f in files)
    info = read_ggml_info(files)
    _assert_facts(info, BUILDS[version])
    counts = [s for s in info.sources if s.fact.endswith(" count")]
    assert counts and all("(stripped)" in s.how for s in counts)
