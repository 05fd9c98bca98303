"""The names contract (model/names.py): what the SQL reads is what the layout writes.

What is written is taken from the synthetic recording's layout and from the committed real
recording the query goldens use (it has ops the synthetic one lacks, such as a sub-op)."""

from __future__ import annotations

import re

from profinfer_perfetto.model.layout import Layout, build_layout
from profinfer_perfetto.model.names import ARG_KEY_PREFIX, COUNTER_ARG_PREFIX, DESC_ARG, arg_key
from profinfer_perfetto.model.trace_model import build
from profinfer_perfetto.query.package import FOLDER
from tests import synthetic, trace_reader
from tests.unit.test_query import TRACE


def _layouts() -> list[Layout]:
    """The synthetic CPU recording's layout, and those of the synthetic Vulkan splits (host
    calls and copies; device times)."""
    return [build_layout(build(rec)) for rec in (synthetic.recording(), synthetic.vulkan_step(),
                                                 synthetic.timed_step())]


def _layout() -> Layout:
    return _layouts()[0]


def _written_args(layout: Layout) -> set[str]:
    names = {name for args in layout.arg_sets for name, _ in args}
    numbered = {DESC_ARG} if (layout.desc >= 0).any() else set()
    return names | numbered | {COUNTER_ARG_PREFIX + c for c in layout.counter_names}


def _recorded_args() -> set[str]:
    return {name for s in trace_reader.read(TRACE).slices for name in s.args}


def _sql() -> dict[str, str]:
    """The profinfer package's modules, by file name."""
    return {str(f.relative_to(FOLDER)): f.read_text() for f in FOLDER.rglob("*.sql")}


def test_written_arg_names_keep_their_name_on_trace_processor() -> None:
    for name in _written_args(_layout()):
        assert arg_key(name) == ARG_KEY_PREFIX + name, name


def test_trace_processor_flattens_dots_and_brackets() -> None:
    assert arg_key("counter.cpu/event=0x3c/[0]") == "debug.counter_cpu/event=0x3c/_0_"


def test_every_arg_key_the_sql_reads_is_written() -> None:
    written = {arg_key(n) for layout in _layouts() for n in _written_args(layout)}
    written |= {arg_key(n) for n in _recorded_args()}
    prefixes = {ARG_KEY_PREFIX + COUNTER_ARG_PREFIX}
    for file, sql in _sql().items():
        for key in set(re.findall(r"'(debug\.[\w-]+)'", sql)) - prefixes:
            assert key in written, f"{file} reads {key}, which no layout writes"
        for pattern in re.findall(r"GLOB '(debug\.[^']*)'", sql):
            assert any(re.fullmatch(pattern.replace("*", ".*"), k) for k in written), file


def test_every_slice_name_the_sql_reads_is_written() -> None:
    strings = {name for layout in _layouts() for name in layout.strings}
    for file, sql in _sql().items():
        for name in re.findall(r"\bname = '([^']+)'", sql):
            assert name in strings, f"{file} reads slices named {name!r}: none written"
