"""Bad input gets one clear sentence on stderr, exit code 2, no traceback and no trace file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Cli


def one_sentence(stderr: str, expected: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and expected in lines[0], stderr


@pytest.mark.root
def test_not_root(cli: Cli, llama: Callable[..., Path], model: Callable[[str], Path],
                  tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    out = tmp_path / "x.pftrace"
    result = cli("record", "-o", out, "--", llama("llama-completion"), "-m",
                 model("tiny-llama"), "-n", "2", user="65534")
    assert result.returncode == 2
    one_sentence(result.stderr, "needs root: run it with sudo")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--", "no-such-llama"], "command not found: no-such-llama"),
        (["--pid", "999999999"], "no process with PID 999999999"),
        (["--counter", "bogus", "--", "/bin/true"], "unknown counter 'bogus'"),
        (["--pid", "1", "--", "/bin/true"], "either a command to run (after --) or --pid"),
    ],
)
def test_bad_target(cli: Cli, tmp_path: Path, args: list[str], expected: str) -> None:
    out = tmp_path / "x.pftrace"
    result = cli("record", "-o", out, *args)
    assert result.returncode == 2
    one_sentence(result.stderr, expected)
    assert not out.exists()


@pytest.mark.root
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--", "/bin/true"], "true ended (complete) without loading the ggml runtime"),
        (["--", "sh", "-c", "exit 3"], "sh ended (target exited with code 3) without loading"),
        (["--duration", "1", "--", "sleep", "60"],
         "sleep did not load the ggml runtime in its first 1 s"),
    ],
)
def test_a_command_that_never_loads_ggml(cli: Cli, tmp_path: Path, args: list[str],
                                         expected: str) -> None:
    out = tmp_path / "x.pftrace"
    result = cli("record", "-o", out, *args)
    assert result.returncode == 2
    one_sentence(result.stderr, expected)
    assert not out.exists()


@pytest.mark.root
def test_unwritable_output(cli: Cli, llama: Callable[..., Path],
                           model: Callable[[str], Path]) -> None:
    result = cli("record", "-o", "/nonexistent/dir/x.pftrace", "--",
                 llama("llama-completion"), "-m", model("tiny-llama"), "-n", "2")
    assert result.returncode == 2
    one_sentence(result.stderr, "cannot write /nonexistent/dir/x.pftrace: No such file")


def test_ebpf_prints_the_program(cli: Cli, llama: Callable[..., Path]) -> None:
    result = cli("record", "--ebpf", "--", llama("llama-completion"))
    assert result.returncode == 0, result.stderr
    assert "#define T_NE 16" in result.stdout
    assert "int op_begin(struct pt_regs *ctx)" in result.stdout
    assert "#define EV_OP_BEGIN 5" in result.stdout  # the probe ABI before the probes
    assert "_Static_assert(sizeof(struct node) == 480" in result.stdout  # and its checks after
    assert "uprobe barrier_enter" in result.stdout and "uretprobe graph_end" in result.stdout
