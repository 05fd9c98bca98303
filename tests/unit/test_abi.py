"""The probe ABI generated from capture/events.py: every record field, kind and constant."""

from __future__ import annotations

import re

import pytest

from profinfer_perfetto.capture import abi
from profinfer_perfetto.capture.events import MAX_COUNTERS, NODE, Backend, Kind, Ring, TokenEntry
from profinfer_perfetto.capture.program import probe_source
from profinfer_perfetto.capture.session import DESCRIBER_CALLERS


@pytest.mark.parametrize("counters", [0, 1, MAX_COUNTERS])
def test_every_field_of_every_struct_is_checked(counters: int) -> None:
    structs = abi.structs(counters)
    checks = abi.layout_checks(structs)
    assert structs["event"].itemsize == 40 + 8 * counters
    for struct, dtype in structs.items():
        for name, (field, offset, *_) in (dtype.fields or {}).items():
            assert f"__builtin_offsetof(struct {struct}, {name}) == {offset}," in checks
            assert f"sizeof(((struct {struct} *)0)->{name}) == {field.itemsize}," in checks
        assert f"sizeof(struct {struct}) == {dtype.itemsize}," in checks


def test_nested_structs_are_checked_too() -> None:
    src = NODE["src"].base
    assert src in abi.structs(0).values()


def test_every_kind_and_constant_is_defined() -> None:
    header = abi.header()
    for prefix, enum in (("EV", Kind), ("BACKEND", Backend), ("TOKEN", TokenEntry),
                         ("RING", Ring)):
        for member in enum:
            assert f"#define {prefix}_{member.name} {member.value}\n" in header
    for name in ("N_RINGS", "N_SRC", "MAX_COUNTERS", "COUNTER_UNREAD", "HIST_BUCKETS"):
        assert f"#define {name} " in header


def test_the_probes_define_no_abi_constant_themselves() -> None:
    defined = set(re.findall(r"^\s*#\s*define\s+(\w+)", probe_source(), re.MULTILINE))
    assert not defined & set(abi.constants())


def test_the_describer_s_callers_are_the_ones_kept_off_links() -> None:
    """The probe programs that tail-call describe_more (through describe_graph) are those the
    session attaches as perf events, as describe_more is (capture/session.py)."""
    bodies = re.finditer(r"^int (\w+)\(struct pt_regs \*ctx\) \{(.*?)^\}", probe_source(),
                         re.M | re.S)
    callers = {m.group(1).encode() for m in bodies if "describe_graph(" in m.group(2)}
    assert callers == DESCRIBER_CALLERS
