"""The built-in engine's SQLite image (query/sqlite_image.py) reads back as written, whatever
number of rows and pages its b-trees have."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from profinfer_perfetto.query import sqlite_image


@pytest.mark.parametrize("rows", [0, 1, 500, 3000, 20000])
def test_every_tree_shape_reads_back(rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With three children an interior page, row counts from none to thousands give leaf
    counts one above a multiple of three (where a last interior page would get a lone child,
    which SQLite reads as a corrupt page) and trees of several levels."""
    monkeypatch.setattr(sqlite_image, "_FANOUT", 3)
    values = np.arange(rows, dtype=np.int64) * 1_000_003
    names = [b"a", b"bb" * 30]
    table = sqlite_image.Table(
        "t", "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER, name TEXT)",
        [sqlite_image.Column("int", values),
         sqlite_image.Column("text", np.arange(rows) % 2, strings=names)])
    with ThreadPoolExecutor(2) as pool:
        image, left = sqlite_image.image([table], pool)
    assert not left
    db = sqlite3.connect(":memory:")
    db.deserialize(image.data)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("SELECT count(*), sum(v), sum(length(name)) FROM t").fetchone() == (
        rows, int(values.sum()) if rows else None, (rows // 2) * 60 + (rows + 1) // 2 if rows
        else None)
    assert db.execute("SELECT v FROM t WHERE id = ?", (rows - 1,)).fetchall() == (
        [(int(values[-1]),)] if rows else [])
