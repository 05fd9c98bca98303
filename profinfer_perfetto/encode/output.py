"""Write a trace file whole or not at all: into a temporary file beside it, then rename.

Every file is new (O_EXCL, O_NOFOLLOW: root never writes through a link or into a file someone
planted at the name), readable by its owner only (as `perf record` makes its data: a trace holds
the target's command line and code addresses), and under sudo handed to the user who ran it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from profinfer_perfetto.errors import ProfinferError

PART_SUFFIX = ".part"
"""A trace `record` is still writing (encode/stream.py): OUTPUT.part until the run ends."""
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def create_new(path: Path) -> int:
    """A file descriptor for writing a file that was not there, mode 0600, owned by the user
    who ran sudo (SUDO_UID, SUDO_GID) where root creates it for them."""
    try:
        fd = os.open(path, _NEW, 0o600)
    except FileExistsError:
        raise ProfinferError(f"{path} is there already (another run writing the same output, "
                             "what a killed one left, or a link): move it away first") from None
    except OSError as exc:
        raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None
    uid, gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    if os.geteuid() == 0 and uid.isdigit() and gid.isdigit():
        os.fchown(fd, int(uid), int(gid))
    return fd


def check_writable(path: Path) -> None:
    """Fail now, before a capture, if the trace could not be written (nor streamed, to
    PATH.part)."""
    part = path.with_name(path.name + PART_SUFFIX)
    if os.path.lexists(part):
        raise ProfinferError(f"{part} is there already (another record writing {path.name}, "
                             "or what a killed one left): move it away first")
    tmp = _temporary(path)
    os.close(create_new(tmp))
    tmp.unlink()


@contextmanager
def atomic_output(path: Path) -> Iterator[IO[bytes]]:
    tmp = _temporary(path)
    fd = create_new(tmp)
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
