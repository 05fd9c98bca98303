"""The records record keeps on disk (capture/spill.py) are never lost before their trace is
whole, and `recover`, which runs as root, reads only a folder a recorder made: cut files,
garbage, a live recorder's folder and planted files end in one sentence."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from profinfer_perfetto.capture import spill as spill_module
from profinfer_perfetto.capture.recorder import RecordRequest
from profinfer_perfetto.capture.run import Drained, Recording, Run, drained_dtypes
from profinfer_perfetto.capture.spill import (
    INDEX_FILE,
    RUN_FILE,
    Spill,
    read_drains,
    spill_path,
)
from profinfer_perfetto.commands import record as record_module
from profinfer_perfetto.commands.record import RecordCommand
from profinfer_perfetto.commands.recover import RecoverCommand
from profinfer_perfetto.encode.stream import part_path
from profinfer_perfetto.errors import ProfinferError
from tests import synthetic

OTHER_UID = 54321
"""A user who is neither root nor the one running the tests."""


@pytest.fixture
def rec() -> Recording:
    return synthetic.decode_run(3, steps=10)


def _left(rec: Recording, output: Path, drains: int = 7) -> Path:
    """The records folder a recorder killed after `drains` drains leaves."""
    spill = Spill(spill_path(output), len(rec.run.counters))
    for i, drained in enumerate(synthetic.drains(rec, 7)[:drains]):
        assert spill(drained, replace(rec.run, end_ns=rec.run.begin_ns + i)) is None
    assert spill.finish() is None
    spill.close()
    return spill.folder


def _fake_record(rec: Recording, fail: BaseException | None = None, drains: int = 7,
                 cpus: list[int] | None = None, threads: int = 0) -> Callable[..., Recording]:
    """record() as a capture of `rec`'s first `drains` drains would go (raising `fail` after
    them), of a target allowed on `cpus` (by default every CPU this process may use) that
    computes on `threads` threads (0: not known)."""

    def fake(request: RecordRequest, probe_plan: object, attached: object,
             sink: Callable[[Drained, Run], str | None],
             helpers: Callable[[list[int], int], object] | None = None) -> Recording:
        if helpers is not None:
            helpers(sorted(os.sched_getaffinity(0)) if cpus is None else cpus, threads)
        for drained in synthetic.drains(rec, 7)[:drains]:
            assert sink(drained, rec.run) is None
        if fail is not None:
            raise fail
        return rec

    return fake


def _record(output: Path) -> int:
    return RecordCommand(RecordRequest(command=["llama-cli"]), output)._spilled(None)


def test_records_stay_when_the_trace_cannot_be_written(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace fails to be written after the capture: the records stay, the sentence says
    how to write the trace from them, and `recover` does."""
    output = tmp_path / "run.pftrace"
    monkeypatch.setattr(record_module, "record", _fake_record(rec))
    part_path(output).mkdir()  # OUTPUT.part cannot be opened as a file
    with pytest.raises(ProfinferError, match=rf"recover {output}` writes its trace"):
        _record(output)
    assert (spill_path(output) / RUN_FILE).is_file()
    part_path(output).rmdir()
    assert RecoverCommand(output).run() == 0
    assert output.is_file() and not spill_path(output).exists()


def test_records_stay_after_a_ctrl_c_while_the_trace_is_written(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "run.pftrace"
    monkeypatch.setattr(record_module, "record", _fake_record(rec))

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(record_module, "write_trace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _record(output)
    assert f"recover {output}` writes its trace" in capsys.readouterr().err
    assert RecoverCommand(output).run() == 0


def test_a_capture_that_fails_before_any_drain_leaves_no_folder(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "run.pftrace"
    monkeypatch.setattr(record_module, "record",
                        _fake_record(rec, ProfinferError("no such counter"), drains=0))
    with pytest.raises(ProfinferError, match=r"^no such counter$"):
        _record(output)
    assert not spill_path(output).exists()


def test_a_failing_writer_ends_the_capture_in_one_sentence(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in the writer thread (not an OSError) stops the capture with the drains written
    so far, where the drain thread once waited forever for a writer that had died."""
    monkeypatch.setattr(spill_module, "QUEUE_BYTES", 0)
    append = Spill._append
    calls = []

    def failing(self: Spill, drained: Drained, run: Run) -> None:
        calls.append(drained)
        if len(calls) > 2:
            raise RuntimeError("a bug")
        append(self, drained, run)

    monkeypatch.setattr(Spill, "_append", failing)
    spill = Spill(spill_path(tmp_path / "run.pftrace"), len(rec.run.counters))
    answers: list[str | None] = []
    capture = threading.Thread(target=lambda: answers.extend(
        spill(drained, rec.run) for drained in synthetic.drains(rec, 7)), daemon=True)
    capture.start()
    capture.join(60)  # a guard against the hang this test is about, not a timing
    assert not capture.is_alive(), "the drain thread waits for a writer that died"
    assert answers[-1] is not None and "failed (RuntimeError('a bug'))" in answers[-1]
    assert spill.finish() == answers[-1]
    assert spill.written == 2
    spill.close()
    assert len(list(read_drains(spill.folder, spill.dtypes))) == 2


def test_files_are_created_for_their_owner_only(tmp_path: Path, rec: Recording) -> None:
    umask = os.umask(0o022)
    try:
        folder = _left(rec, tmp_path / "run.pftrace")
    finally:
        os.umask(umask)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_the_run_file_is_not_written_through_a_planted_symlink(
        tmp_path: Path, rec: Recording) -> None:
    victim = tmp_path / "victim"
    victim.write_text("kept")
    spill = Spill(spill_path(tmp_path / "run.pftrace"), len(rec.run.counters))
    (spill.folder / f".{RUN_FILE}.partial").symlink_to(victim)
    spill(synthetic.drains(rec, 7)[0], rec.run)
    assert spill.finish() is not None
    spill.close()
    assert victim.read_text() == "kept"


def test_the_records_are_on_disk_before_the_run_file_names_them(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file written is flushed before RUN_FILE is renamed, and the folder after it."""
    log: list[tuple[str, object]] = []
    for name in ("write", "fsync", "fdatasync"):
        monkeypatch.setattr(os, name, _logged(log, name, getattr(os, name)))
    monkeypatch.setattr(os, "replace", _logged(log, "replace", os.replace))
    folder = _left(rec, tmp_path / "run.pftrace", drains=3)
    synced: set[object] = set()
    written: set[object] = set()
    for i, (call, fd) in enumerate(log):
        if call == "write":
            written.add(fd)
            synced.discard(fd)
        elif call in ("fsync", "fdatasync"):
            synced.add(fd)
        elif call == "replace":
            assert written <= synced, "a file written but not flushed"
            assert log[i + 1][0] == "fsync", "the folder is flushed after the rename"
    assert [call for call, _ in log].count("replace") == 3 and (folder / RUN_FILE).exists()


def _logged(log: list[tuple[str, object]], name: str,
            call: Callable[..., object]) -> Callable[..., object]:
    def logging(fd: object, *args: object) -> object:
        log.append((name, fd))
        return call(fd, *args)
    return logging


def test_drains_cut_short_are_left_out_and_counted(
        tmp_path: Path, rec: Recording, capsys: pytest.CaptureFixture[str]) -> None:
    """A data file shorter than the index says keeps every drain before the cut."""
    output = tmp_path / "run.pftrace"
    folder = _left(rec, output)
    sent = synthetic.drains(rec, 7)
    whole = sum(d.events.nbytes for d in sent[:5])
    os.truncate(folder / "events.bin", whole + 10)
    back = read_drains(folder, drained_dtypes(len(rec.run.counters)))
    assert back.cut == 2
    assert [d.events.tobytes() for d in back] == [d.events.tobytes() for d in sent[:5]]
    assert RecoverCommand(output).run() == 0
    assert "note: the records of the run's last 2 drains were cut off" in capsys.readouterr().out


@pytest.mark.parametrize("count", [-1, 1 << 40, (1 << 63) - 1])
def test_garbage_counts_in_the_index_are_one_sentence(
        tmp_path: Path, rec: Recording, count: int) -> None:
    """A count no file could hold, or a negative one: no huge read, no ValueError."""
    output = tmp_path / "run.pftrace"
    folder = _left(rec, output)
    index = np.fromfile(folder / INDEX_FILE, np.int64)
    index[0] = count
    index.tofile(folder / INDEX_FILE)
    with pytest.raises(ProfinferError, match=f"{INDEX_FILE}"):
        RecoverCommand(output).run()
    assert folder.exists() and not output.exists()


@pytest.mark.parametrize("mangle", [
    lambda f: (f / INDEX_FILE).unlink(),
    lambda f: (f / "nodes.bin").unlink(),
    lambda f: (f / RUN_FILE).write_text("[1, 2]"),
    lambda f: (f / RUN_FILE).write_text('{"format": 1, "run": [1]}'),
    lambda f: (f / RUN_FILE).write_text("[" * 100_000),
    lambda f: (f / RUN_FILE).write_bytes(b"\xff\xfe"),
])
def test_a_mangled_folder_is_one_sentence(
        tmp_path: Path, rec: Recording, mangle: Callable[[Path], object]) -> None:
    output = tmp_path / "run.pftrace"
    mangle(_left(rec, output))
    with pytest.raises(ProfinferError):
        RecoverCommand(output).run()


def test_recover_refuses_the_folder_of_a_recorder_still_running(
        tmp_path: Path, rec: Recording) -> None:
    output = tmp_path / "run.pftrace"
    spill = Spill(spill_path(output), len(rec.run.counters))
    for drained in synthetic.drains(rec, 7)[:3]:
        spill(drained, rec.run)
    assert spill.finish() is None
    with pytest.raises(ProfinferError, match="a recorder is still writing"):
        RecoverCommand(output).run()
    assert len(list(spill.drains())) == 3
    spill.close()
    assert RecoverCommand(output).run() == 0


def _linked_folder(folder: Path) -> None:
    real = folder.with_name("real.records")
    folder.rename(real)
    folder.symlink_to(real)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path, 0o600)


@pytest.mark.parametrize(("plant", "says"), [
    (_linked_folder, "a symlink is not read"),
    (lambda f: _relinked(f / RUN_FILE), "cannot read"),
    (lambda f: os.chown(f, OTHER_UID, -1), f"belongs to uid {OTHER_UID}"),
    (lambda f: os.chown(f / "events.bin", OTHER_UID, -1), f"belongs to uid {OTHER_UID}"),
    (lambda f: f.chmod(0o770), "can be written by other users"),
    (lambda f: (f / RUN_FILE).chmod(0o646), "can be written by other users"),
    (lambda f: _fifo(f / "events.bin"), "not a recorder's"),
    (lambda f: os.link(f / "nodes.bin", f.parent / "elsewhere"), "not a recorder's"),
])
def test_recover_refuses_a_planted_folder(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch,
        plant: Callable[[Path], object], says: str) -> None:
    """`recover` runs as root: a folder or file that is a symlink (or a FIFO, or a hard link
    to another file), that another user owns or can write is not read, nor removed."""
    monkeypatch.delenv("SUDO_UID", raising=False)
    output = tmp_path / "run.pftrace"
    folder = _left(rec, output)
    plant(folder)
    with pytest.raises(ProfinferError, match=says):
        RecoverCommand(output).run()
    assert os.path.lexists(folder) and not output.exists()


def _relinked(path: Path) -> None:
    """`path` made a symlink to a copy of itself."""
    copy = path.with_name("copy")
    shutil.copy(path, copy)
    path.unlink()
    path.symlink_to(copy)


def test_under_sudo_the_invoking_users_folder_is_read(
        tmp_path: Path, rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "run.pftrace"
    folder = _left(rec, output)
    for path in [folder, *folder.iterdir()]:
        os.chown(path, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("SUDO_UID", str(OTHER_UID))
    assert RecoverCommand(output).run() == 0
