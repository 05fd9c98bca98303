"""protos/ declares a subset of Perfetto's schema with Perfetto's own field numbers and types."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from profinfer_perfetto.encode import profinfer_trace_pb2 as ours

ROOT = Path(__file__).resolve().parents[2]


def _walk(mine: Any, theirs: Any, path: str) -> list[str]:
    """Each field of `mine` against `theirs` (protobuf Descriptors, C or Python ones)."""
    problems = []
    for f in mine.fields:
        other = theirs.fields_by_name.get(f.name)
        where = f"{path}.{f.name}"
        if other is None:
            problems.append(f"{where}: not in Perfetto's schema")
            continue
        if (f.number, f.type, f.is_repeated) != (other.number, other.type, other.is_repeated):
            problems.append(f"{where}: {f.number}/{f.type} vs {other.number}/{other.type}")
        if f.message_type is not None:
            problems += _walk(f.message_type, other.message_type, where)
        if f.enum_type is not None:
            theirs_values = {v.name: v.number for v in other.enum_type.values}
            for v in f.enum_type.values:
                if theirs_values.get(v.name) != v.number:
                    problems.append(f"{where}: enum {v.name}={v.number}")
    return problems


def test_every_declared_field_matches_perfetto() -> None:
    assert _walk(ours.Trace.DESCRIPTOR, official.Trace.DESCRIPTOR, "Trace") == []


def test_generated_module_is_up_to_date(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{ROOT / 'protos'}",
         f"--python_out={tmp_path}", str(ROOT / "protos" / "profinfer_trace.proto")],
        check=True,
    )
    committed = ROOT / "profinfer_perfetto" / "encode" / "profinfer_trace_pb2.py"
    assert (tmp_path / "profinfer_trace_pb2.py").read_text() == committed.read_text(), (
        "protos/ changed: run `nox -s protos`"
    )
