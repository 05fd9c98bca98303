"""Fuzzing the records folder `recover` reads (capture/spill.py): copies of a real one, its files
removed, cut, overwritten, grown or replaced (run.json's fields with other JSON, the index with
other counts), end in a trace or in one sentence (ProfinferError), never another exception."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from profinfer_perfetto.capture.run import drained_dtypes
from profinfer_perfetto.capture.spill import INDEX_FILE, RUN_FILE, Spill, read_drains, spill_path
from profinfer_perfetto.commands.recover import RecoverCommand
from profinfer_perfetto.errors import ProfinferError
from tests import synthetic

Folder = dict[str, bytes | None]
"""A records folder: each file's bytes (None: removed)."""


@functools.cache
def _real() -> tuple[tuple[str, bytes], ...]:
    """The files of a folder a recorder left after three drains."""
    rec = synthetic.decode_run(3, steps=4)
    with tempfile.TemporaryDirectory() as tmp:
        spill = Spill(spill_path(Path(tmp) / "run.pftrace"), len(rec.run.counters))
        for drained in synthetic.drains(rec, 3):
            assert spill(drained, rec.run) is None
        assert spill.finish() is None
        spill.close()
        return tuple(sorted((p.name, p.read_bytes()) for p in spill.folder.iterdir()))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


def _with_field(data: bytes, key: str, value: Any) -> bytes:
    """run.json with the run's `key` set to `value`."""
    doc = json.loads(data)
    doc["run"][key] = value
    return json.dumps(doc).encode()


def _overwritten(data: bytes, at: int, patch: bytes) -> bytes:
    at = min(at, len(data))
    return data[:at] + patch + data[at + len(patch):]


def _mutation(name: str, data: bytes) -> st.SearchStrategy[bytes | None]:
    """Ways one file of the folder may be changed."""
    ways = [
        st.none(),
        st.integers(0, len(data)).map(lambda n: data[:n]),
        st.binary(max_size=256),
        st.builds(_overwritten, st.just(data), st.integers(0, len(data)),
                  st.binary(min_size=1, max_size=16)),
        st.binary(min_size=1, max_size=256).map(lambda more: data + more),
    ]
    if name == RUN_FILE:
        fields = sorted(json.loads(data)["run"])
        ways.append(st.builds(_with_field, st.just(data), st.sampled_from(fields), JSON))
    if name == INDEX_FILE:
        counts = st.lists(st.integers(-(1 << 63), (1 << 63) - 1) | st.integers(0, 1000),
                          max_size=20)
        ways.append(counts.map(lambda c: np.array(c, np.int64).tobytes()))
    return st.one_of(ways)


@st.composite
def _folders(draw: st.DrawFn) -> Folder:
    """The real folder with some of its files changed."""
    files: Folder = dict(_real())
    for name in draw(st.sets(st.sampled_from(sorted(files)), min_size=1)):
        data = files[name]
        assert data is not None
        files[name] = draw(_mutation(name, data))
    return files


@settings(deadline=None)
@given(_folders())
def test_fuzz_spill_folder_is_recovered_or_refused_in_one_sentence(files: Folder) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "run.pftrace"
        folder = spill_path(output)
        folder.mkdir(mode=0o700)
        for name, data in files.items():
            if data is not None:
                (folder / name).write_bytes(data)
                os.chmod(folder / name, 0o600)
        with contextlib.suppress(ProfinferError):
            for _ in read_drains(folder, drained_dtypes(1)):
                pass
        with contextlib.suppress(ProfinferError):
            RecoverCommand(output).run()
