"""Write a trace file whole or not at all: into a temporary file beside it, then rename.

The temporary file is made new, private to the user (files.create_new), and the trace
keeps it so when it takes its name.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from profinfer_perfetto.errors import ProfinferError
from profinfer_perfetto.files import create_new, temporary_for

PART_SUFFIX = ".part"
"""A trace `record` is still writing (encode/stream.py): OUTPUT.part until the run ends."""


def check_writable(path: Path) -> None:
    """Fail now, before a capture, if the trace could not be written (nor streamed, to
    PATH.part)."""
    part = path.with_name(path.name + PART_SUFFIX)
    if os.path.lexists(part):
        raise ProfinferError(f"{part} is there already (another record writing {path.name}, "
                             "or what a killed one left): move it away first")
    tmp = temporary_for(path)
    os.close(create_new(tmp, path))
    tmp.unlink()


@contextmanager
def atomic_output(path: Path) -> Iterator[IO[bytes]]:
    tmp = temporary_for(path)
    fd = create_new(tmp, path)
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
