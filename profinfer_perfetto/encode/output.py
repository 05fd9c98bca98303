"""Write a trace file whole or not at all: into a temporary file beside it, then rename."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from profinfer_perfetto.errors import ProfinferError

PART_SUFFIX = ".part"
"""A trace `record` is still writing (encode/stream.py): OUTPUT.part until the run ends."""


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


def check_writable(path: Path) -> None:
    """Fail now, before a capture, if the trace could not be written."""
    tmp = _temporary(path)
    try:
        tmp.open("wb").close()
        tmp.unlink()
    except OSError as exc:
        raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None


@contextmanager
def atomic_output(path: Path) -> Iterator[IO[bytes]]:
    tmp = _temporary(path)
    try:
        with tmp.open("wb") as out:
            yield out
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
