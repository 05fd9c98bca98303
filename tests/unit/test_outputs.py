"""What the commands write: new files of mode 0600, handed to the user who ran sudo, never
written through a link planted at a temporary name (real files and links)."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from profinfer_perfetto.encode.output import atomic_output, check_writable
from profinfer_perfetto.encode.stream import Rotation, TraceStream, part_path, write_trace
from profinfer_perfetto.errors import ProfinferError
from tests import synthetic

SUDO_USER = 65534


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file a planted link points at: it must stay as it is."""
    path = tmp_path / "victim"
    path.write_bytes(b"precious")
    return path


@pytest.fixture
def under_sudo(monkeypatch: pytest.MonkeyPatch) -> int:
    """SUDO_UID and SUDO_GID as sudo sets them; the owner the outputs should get."""
    monkeypatch.setenv("SUDO_UID", str(SUDO_USER))
    monkeypatch.setenv("SUDO_GID", str(SUDO_USER))
    return SUDO_USER if os.geteuid() == 0 else os.getuid()


def _private_to(path: Path, owner: int) -> None:
    st = path.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == owner and (st.st_gid == owner or os.geteuid() != 0)


def one_sentence(error: pytest.ExceptionInfo[ProfinferError], path: Path) -> None:
    assert "\n" not in str(error.value) and str(path) in str(error.value)


def test_a_trace_written_whole_is_private_to_the_sudo_user(tmp_path: Path,
                                                          under_sudo: int) -> None:
    out = tmp_path / "plot.svg"
    with atomic_output(out) as f:
        f.write(b"<svg/>")
    assert out.read_bytes() == b"<svg/>"
    _private_to(out, under_sudo)


def test_a_streamed_trace_and_its_part_are_private_to_the_sudo_user(tmp_path: Path,
                                                                    under_sudo: int) -> None:
    out, rec = tmp_path / "run.pftrace", synthetic.recording()
    stream = TraceStream(out)
    _private_to(part_path(out), under_sudo)
    stream.finish(rec)
    _private_to(out, under_sudo)


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path: Path,
                                                              victim: Path) -> None:
    out = tmp_path / "plot.svg"
    planted = tmp_path / f".plot.svg.{os.getpid()}.partial"
    planted.symlink_to(victim)
    for write in (check_writable, lambda path: atomic_output(path).__enter__()):
        with pytest.raises(ProfinferError) as error:
            write(out)
        one_sentence(error, planted)
        assert victim.read_bytes() == b"precious" and planted.is_symlink()
    assert not out.exists()


def test_a_link_planted_at_the_part_name_is_not_followed(tmp_path: Path, victim: Path) -> None:
    out = tmp_path / "run.pftrace"
    part_path(out).symlink_to(victim)
    with pytest.raises(ProfinferError) as error:
        write_trace(out, [], synthetic.recording())
    one_sentence(error, part_path(out))
    assert victim.read_bytes() == b"precious" and part_path(out).is_symlink()
    assert not out.exists()


def test_a_second_stream_to_one_output_is_refused_before_it_truncates(tmp_path: Path) -> None:
    out = tmp_path / "run.pftrace"
    first = TraceStream(out)
    with pytest.raises(ProfinferError) as error:
        check_writable(out)
    one_sentence(error, part_path(out))
    with pytest.raises(ProfinferError):
        TraceStream(out)
    first.finish(synthetic.recording())
    assert out.stat().st_size > 0 and not part_path(out).exists()


def test_a_link_planted_at_the_next_rotated_part_is_not_followed(tmp_path: Path,
                                                                 victim: Path) -> None:
    rec = synthetic.decode_run(6, steps=30)
    out = tmp_path / "run.pftrace"
    rotation = Rotation(max_bytes=4096)
    part_path(rotation.path(out, 1)).symlink_to(victim)
    stream = TraceStream(out, rotation)
    for drained in synthetic.drains(rec, 15):
        stream(drained, replace(rec.run, status="running"))
    with pytest.raises(ProfinferError) as error:
        stream.finish(rec)
    one_sentence(error, part_path(rotation.path(out, 1)))
    assert victim.read_bytes() == b"precious"
    assert stream.files == [rotation.path(out, 0)] and rotation.path(out, 0).stat().st_size
