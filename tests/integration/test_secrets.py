"""A recorded run keeps no secret of the target's command line, in a file private to its owner."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from profinfer_perfetto.capture.redact import REDACTED
from tests import trace_reader
from tests.conftest import Cli
from tests.integration.test_record import completion, running_server, start_recorder, stop_recorder

pytestmark = pytest.mark.root

SECRET = "s3cret"


def test_a_token_on_the_command_line_stays_out_of_the_trace(
        cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
        tmp_path: Path) -> None:
    out = tmp_path / "run.pftrace"
    command = [*completion(llama, model("tiny-llama"), 1, n=2), "--hf-token", SECRET]
    result = cli("record", "-o", out, "--", *command)
    assert result.returncode == 0, result.stderr
    assert SECRET.encode() not in out.read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    trace = trace_reader.read(out)
    (rec,) = [s for s in trace.slices if s.name == "record"]
    assert rec.args["command"].endswith(f"--hf-token {REDACTED}")


def test_an_api_key_of_a_server_recorded_by_pid_stays_out_of_the_trace(
        llama: Callable[..., Path], model: Callable[[str], Path], tmp_path: Path) -> None:
    out = tmp_path / "server.pftrace"
    with running_server(llama, model, "-c", "512", "--api-key", SECRET) as (server, _):
        recorder, _ = start_recorder(out, "--pid", str(server.pid))
        stop_recorder(recorder)
    assert SECRET.encode() not in out.read_bytes()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    (rec,) = [s for s in trace_reader.read(out).slices if s.name == "record"]
    assert rec.args["command"].endswith(f"--api-key {REDACTED}")
