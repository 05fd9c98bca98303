"""record --stream writes its trace as the run goes: a killed recorder leaves a readable trace up
to the kill (by default, its records, which `recover` writes as one), a full disk ends the
capture with what fit, and --max-size/--rotate make whole files."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from profinfer_perfetto.capture.spill import INDEX_FILE
from profinfer_perfetto.capture.watch import process_state
from profinfer_perfetto.commands.recover import RECOVERED
from profinfer_perfetto.query.engines import EngineChoice
from profinfer_perfetto.query.session import TraceQuery
from scripts import assets
from tests.conftest import Cli
from tests.integration.test_record import PROMPT, start_recorder, wait_for_a_token
from tests.waiting import wait_until

pytestmark = pytest.mark.root

TP_BIN = os.environ.get("PROFINFER_TP_BIN") or None
ENGINES = ("builtin", "trace_processor") if TP_BIN else ("builtin",)
def generation(model: str, n: int) -> list[str]:
    """`n` tokens (-1: without end, the context shifting) of a seeded generation."""
    return [str(assets.llama_bin("llama-completion")), "-m", str(assets.model(model)), "-p",
            PROMPT, "-n", str(n), "-t", "2", "-no-cnv", "--no-warmup", "-s", "1", "--ignore-eos",
            "--context-shift", "-c", "256"]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _grown(path: Path, size: int) -> int:
    """Wait until the file at `path` is larger than `size` bytes; the size it was seen at."""
    seen = size

    def larger() -> bool:
        nonlocal seen
        seen = _size(path)
        return seen > size

    wait_until(larger, f"{path.name} grew", 120)
    return seen


def _copy(written: Path, to: Path) -> None:
    """A copy of the trace being streamed, or of the records folder: its index of whole drains
    first (the records it counts are on the disk before it), then the rest."""
    if written.is_file():
        shutil.copyfile(written, to)
        return
    to.mkdir(mode=0o700)
    for name in sorted((p.name for p in written.iterdir()), key=lambda n: n != INDEX_FILE):
        shutil.copy2(written / name, to / name)


def _read_output(recorder: subprocess.Popen[str], size: int) -> None:
    """Read `size` more bytes of what the target prints (its tokens, as it samples them)."""
    assert recorder.stdout is not None
    while size > 0:
        chunk = os.read(recorder.stdout.fileno(), size)
        assert chunk, "the target's output ended"
        size -= len(chunk)


def _step_begins(cli: Cli, written: Path, stream: bool) -> dict[str, set[int]]:
    """Where each step of the trace in `written` (OUTPUT.part, or OUTPUT.records which
    `recover` writes as OUTPUT) begins, on each engine."""
    trace = written
    if not stream:
        trace = written.with_suffix("")
        recovered = cli("recover", trace)
        assert recovered.returncode == 0, recovered.stderr
        assert f": {RECOVERED}" in recovered.stdout
        assert sorted(trace.parent.iterdir()) == [trace]
    begins = {}
    for engine in ENGINES:
        with TraceQuery(trace, EngineChoice(engine)) as q:
            begins[engine] = {ts for (ts,) in q.sql("select ts from profinfer_step").rows}
    return begins


@pytest.mark.parametrize(("stream", "seed"), [(True, 1), (True, 2), (False, 4)])
def test_a_killed_recorder_leaves_the_run_up_to_the_kill(cli: Cli, tmp_path: Path,
                                                         stream: bool, seed: int) -> None:
    """SIGKILL after a random number of the target's bytes past the moment the recorder had
    written its first tokens: with --stream, OUTPUT.part opens on both engines (and in
    trace_processor with no error in its stats); by default, `recover` writes OUTPUT from the
    records left in OUTPUT.records. Either holds every step that a copy of it taken just before
    the kill held, at least the prefill; the target runs on, unprobed."""
    out = tmp_path / "run" / "run.pftrace"
    written = out.with_name(out.name + (".part" if stream else ".records"))
    before = tmp_path / "before" / written.name
    out.parent.mkdir()
    before.parent.mkdir()
    recorder, pid = start_recorder(out, *(["--stream"] if stream else []), "--",
                                   *generation("medium-llama", -1))
    try:
        wait_for_a_token(recorder)
        # twice: the second write follows a drain that began after the token was printed
        grows = written if stream else written / INDEX_FILE
        _grown(grows, _grown(grows, _size(grows)))
        _read_output(recorder, random.Random(seed).randint(1, 200))
        _copy(written, before)
        recorder.kill()
        recorder.wait()
        assert process_state(pid) not in ("T", "t")
    finally:
        os.kill(pid, signal.SIGKILL)
    assert not out.exists()
    earlier, after = _step_begins(cli, before, stream), _step_begins(cli, written, stream)
    for engine in ENGINES:
        assert earlier[engine] and earlier[engine] <= after[engine], engine


@contextmanager
def _small_disk(tmp_path: Path, size: str) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                   check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.parametrize("stream", [True, False])
def test_a_full_disk_ends_the_capture_with_what_fit(cli: Cli, tmp_path: Path,
                                                    stream: bool) -> None:
    """Recording into a small filesystem: one sentence and exit 2, and the target is not left
    stopped; streamed (into 1 MiB: the run's trace takes 3 to 6 MB, the less the faster the
    machine, whose shorter times make shorter varints, and on 2026-12-02 a 4 MiB disk held it
    all; a chunk, at most QUEUED_DRAINS drains, about 0.1 MB), the trace holds the whole chunks
    that fit; by default (into 4 MiB: the records, kept on disk until the run ends, take about
    60 MB, in files of a few MiB), no trace, and the records that fit stay for `recover`, as the
    sentence says."""
    with _small_disk(tmp_path, "1m" if stream else "4m") as disk:
        out = disk / "run.pftrace"
        result = cli("record", "-o", out, *(["--stream"] if stream else []), "--",
                     *generation("tiny-llama", 3000))
        assert result.returncode == 2, result.stderr
        (said,) = [line for line in result.stderr.splitlines()
                   if line.startswith("profinfer-perfetto:") and "tracing pid" not in line]
        assert "No space left on device" in said
        pid = int(result.stderr.split("tracing pid ")[1].split(";")[0])
        assert process_state(pid) not in ("T", "t")
        if not stream:
            assert "profinfer-perfetto recover" in said
            assert [p.name for p in disk.iterdir()] == ["run.pftrace.records"]
            return
        for engine in ENGINES:
            with TraceQuery(out, EngineChoice(engine)) as q:
                assert q.metric("token_steps").rows, engine
                assert "cut short" not in q.how


def test_rotation_keeps_the_newest_whole_files(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "run.pftrace"
    # tokens enough for more than three files of 1 MiB, however fast the machine: about 1.4 KB
    # of trace per token (2026-12-02: 1,500 tokens made 2.1 MB, two files, and the test failed
    # where no chunk crossed a third; 3,000 made four)
    result = cli("record", "-o", out, "--max-size", "1M", "--rotate", "2",
                 "--", *generation("tiny-llama", 4000))
    assert result.returncode == 0, result.stderr
    files = sorted(tmp_path.glob("run.*.pftrace"))
    assert len(files) == 2 and not list(tmp_path.glob("*.part"))
    assert "each a whole trace" in result.stdout
    numbers = [int(f.name.split(".")[1]) for f in files]
    assert numbers[1] == numbers[0] + 1 >= 2, "older files were written, then deleted"
    for engine in ENGINES:
        steps = []
        for f in files:
            with TraceQuery(f, EngineChoice(engine)) as q:
                steps.append([row[0] for row in q.metric("token_steps").rows])
                status = q.recording_args()["status"]
            assert status == ("complete" if f == files[-1]
                              else f"continued in {files[1].name}")
        assert steps[0] and steps[1] and steps[1][0] == steps[0][-1] + 1, engine


def test_by_default_the_run_is_written_when_it_ends(cli: Cli, tmp_path: Path) -> None:
    """Without --stream: nothing beside the target while it runs but writing its records
    (OUTPUT.records, gone once the trace is written); one whole trace at the end."""
    out = tmp_path / "run.pftrace"
    result = cli("record", "-o", out, "--", *generation("tiny-llama", 16))
    assert result.returncode == 0, result.stderr
    assert sorted(tmp_path.iterdir()) == [out]
    with TraceQuery(out, EngineChoice("builtin")) as q:
        assert len(q.metric("token_steps").rows) == 16
        assert q.recording_args()["status"] == "complete"
    refused = cli("record", "-o", out, "--no-stream", "--max-size", "1M", "--", "true")
    assert refused.returncode == 2 and "--no-stream" in refused.stderr
