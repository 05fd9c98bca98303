"""The files the commands write: each made new, readable by its owner only, the user's.

Every file is new (O_EXCL, O_NOFOLLOW: root never writes through a link or into a file someone
planted at the name), readable by its owner only (as `perf record` makes its data: a trace holds
the target's command line and code addresses), and under sudo handed to the user who ran it.
"""

from __future__ import annotations

import os
from pathlib import Path

from profinfer_perfetto.errors import ProfinferError

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def invoking_user() -> int:
    """The user who ran the command: the one sudo was run by, else the effective user."""
    sudo = os.environ.get("SUDO_UID", "")
    return int(sudo) if sudo.isdigit() else os.geteuid()


def open_new(path: Path) -> int:
    """A file descriptor for writing a file that was not there, mode 0600, owned by the user
    who ran sudo (SUDO_UID, SUDO_GID) where root creates it for them; OSError otherwise."""
    fd = os.open(path, _NEW, 0o600)
    gid = os.environ.get("SUDO_GID", "")
    if os.geteuid() == 0 and "SUDO_UID" in os.environ and gid.isdigit():
        os.fchown(fd, invoking_user(), int(gid))
    return fd


def create_new(path: Path, final: Path | None = None) -> int:
    """open_new, its failure said in one sentence (naming `final`, the file that `path` is the
    temporary of, where it cannot be written)."""
    try:
        return open_new(path)
    except FileExistsError:
        raise ProfinferError(f"{path} is there already (another run writing the same output, "
                             "what a killed one left, or a link): move it away first") from None
    except OSError as exc:
        raise ProfinferError(f"cannot write {final or path}: {exc.strerror}") from None


def temporary_for(path: Path) -> Path:
    """Where a file is written before it takes its name: beside it, hidden, this process's."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` whole or not at all: into a new private file beside it, then renamed
    (over a link at `path`, never through it)."""
    tmp = temporary_for(path)
    fd = create_new(tmp, path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None
