"""Exit codes come from one place (cli.main over errors.ExitCode): 0 ok, 1 a regression, 2 bad
input in one sentence, 3 an internal error with its traceback, never 1 (which CI reads as a
regression). check's 0, 1 and 2 through the CLI are in test_check.py."""

from __future__ import annotations

import sys

import pytest

from profinfer_perfetto import cli
from profinfer_perfetto.commands.check import CheckCommand
from profinfer_perfetto.errors import ExitCode, ProfinferError


def _main(monkeypatch: pytest.MonkeyPatch, raised: BaseException) -> int:
    def run(self: CheckCommand) -> int:
        raise raised

    monkeypatch.setattr(CheckCommand, "run", run)
    monkeypatch.setattr(sys, "argv", ["profinfer-perfetto", "check", "new.pftrace",
                                      "--baseline", "old.pftrace"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    return int(exited.value.code or 0)


def test_an_unexpected_error_is_3_with_its_traceback(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, KeyError("a bug")) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "KeyError: 'a bug'" in err
    assert err.rstrip().splitlines()[-1].startswith("profinfer-perfetto: internal error")


def test_bad_input_is_2_in_one_sentence(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _main(monkeypatch, ProfinferError("no trace at new.pftrace")) == 2
    assert capsys.readouterr().err == "profinfer-perfetto: no trace at new.pftrace\n"


def test_an_interrupt_is_130(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _main(monkeypatch, KeyboardInterrupt()) == 130


def test_the_codes() -> None:
    assert [int(c) for c in (ExitCode.OK, ExitCode.REGRESSION, ExitCode.BAD_INPUT,
                             ExitCode.INTERNAL)] == [0, 1, 2, 3]
