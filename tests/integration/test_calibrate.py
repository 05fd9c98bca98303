"""calibrate measures this machine's roofs and stores them; record writes them into its trace,
where `roofline` reads them; bad input in one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.machine.peaks import PeakKind, load, matmul_weights
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests.conftest import Cli


@pytest.mark.root
def test_calibrated_roofs_reach_the_roofline(cli: Cli, tmp_path: Path) -> None:
    peaks_file, model = tmp_path / "peaks.json", assets.model("tiny-llama")
    result = cli("calibrate", "-o", peaks_file, "--threads", "1", "--threads", "2", "--mib", "32",
                 "--llama-bench", assets.llama_bin("llama-bench"), "--model", model)
    assert result.returncode == 0, result.stderr
    peaks = load(peaks_file).peaks
    assert [(p.kind, p.threads) for p in peaks] == [
        (PeakKind.MEMORY, 1), (PeakKind.MEMORY, 2), (PeakKind.COMPUTE, 1), (PeakKind.COMPUTE, 2)]
    assert all(p.value > 0 for p in peaks)
    assert {p.dtype for p in peaks if p.kind == PeakKind.COMPUTE} == {matmul_weights(model)[1]}

    trace = tmp_path / "run.pftrace"
    result = cli("record", "--peaks", peaks_file, "-o", trace, "--",
                 assets.llama_bin("llama-completion"), "-m", model, "-p", "Paris is", "-n", "4",
                 "-t", "2", "-no-cnv", "--no-warmup")
    assert result.returncode == 0, result.stderr
    with TraceQuery(trace, EngineChoice("builtin")) as q:
        rows = q.metric("roofline")
    memory = {p.threads: p.value for p in peaks if p.kind == PeakKind.MEMORY}
    column = rows.columns.index("peak_gbyte_per_s")
    assert rows.rows and {r[column] for r in rows.rows} == {memory[2]}


def test_bad_roofs_are_one_sentence(cli: Cli, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": 1, "peaks": [{"kind": "speed"}]}')
    for args, said in [
        (("calibrate", "-o", tmp_path / "p.json", "--model", tmp_path / "m.gguf"),
         "--model needs --llama-bench"),
        (("calibrate", "-o", tmp_path / "p.json", "--llama-bench", "/bin/true", "--model",
          tmp_path / "m.gguf"), "m.gguf does not exist"),
        (("record", "--peaks", tmp_path / "none.json", "--", "true"), "cannot read the peaks"),
        (("calibrate", "-o", "/proc/peaks.json", "--threads", "1"), "cannot write /proc/peaks"),
        (("record", "--peaks", broken, "--", "true"), "holds no peaks of"),
    ]:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], (args, result.stderr)
    assert not (tmp_path / "p.json").exists()
