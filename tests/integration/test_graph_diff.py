"""The graph diff on real recordings: runs of one command have the same graph, and a copy of the
model with one matmul's weights of another type is named by the node that reads them (the
issue's medium-llama-down3 case on tiny-llama, whose weights are F16 and F32 only)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from profinfer_perfetto.errors import ExitCode
from tests.conftest import Cli
from tests.integration.test_record import completion

pytestmark = pytest.mark.root


def _retyped(model: Path, out: Path, tensor: str) -> Path:
    """A copy of an F16/F32 GGUF model with `tensor`'s weights as F32 (the same values)."""
    reader = gguf.GGUFReader(model)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(out, str(arch))
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        kind = field.types[0]
        writer.add_key_value(field.name, field.contents(), kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY
                             else None)
    for t in reader.tensors:
        assert t.tensor_type in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32)
        writer.add_tensor(t.name, t.data.astype(np.float32) if t.name == tensor else t.data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def test_a_retyped_tensor_is_named_and_runs_of_one_command_are_the_same(
    cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path
) -> None:
    tiny = model("tiny-llama")
    retyped = _retyped(tiny, tmp_path / "tiny-llama-down1.gguf", "blk.1.ffn_down.weight")

    def record(name: str, gguf_file: Path) -> Path:
        out = tmp_path / f"{name}.pftrace"
        result = cli("record", "-o", out, "--", *completion(llama, gguf_file, 1))
        assert result.returncode == 0, result.stderr
        return out

    base, again, new = record("base", tiny), record("again", tiny), record("new", retyped)
    same = cli("check", again, "--baseline", base, "--engine", "builtin")
    assert "the graph is the baseline's" in same.stdout, same.stdout + same.stderr
    changed = cli("check", new, "--baseline", base, "--engine", "builtin")
    # Exit 1 where the f32 weights also made ffn_down-1 measurably slower, else 4.
    assert changed.returncode in (ExitCode.REGRESSION, ExitCode.GRAPH_CHANGED), changed.stderr
    lines = changed.stdout.splitlines()
    assert f"the graph changed: {new} differs from the baseline in 3 of its facts" in lines
    # llama.cpp names the output of layer 1's ffn_down matmul ffn_out-1.
    assert "  ffn_out-1 MUL_MAT: weights f16 768x256 -> f32 768x256" in lines
