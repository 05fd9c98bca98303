"""Counters by name: perf's generic names, and a PMU's events as perf writes them (PMU/EVENT/ by
their sysfs name, PMU/FIELD=VALUE,.../ raw), placed in the config as the PMU's format says."""

from __future__ import annotations

from pathlib import Path

import pytest

from profinfer_perfetto.capture import counters
from profinfer_perfetto.capture.counters import counter_config
from profinfer_perfetto.errors import ProfinferError


@pytest.fixture
def pmus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PMU `cpu` of type 4 laid out as x86's core PMU is in sysfs."""
    cpu = tmp_path / "cpu"
    (cpu / "events").mkdir(parents=True)
    (cpu / "format").mkdir()
    (cpu / "type").write_text("4\n")
    for field, bits in {"event": "config:0-7,32-35", "umask": "config:8-15",
                        "cmask": "config:24-31", "ldlat": "config1:0-15"}.items():
        (cpu / "format" / field).write_text(bits + "\n")
    (cpu / "events" / "mem-loads").write_text("event=0xcd,umask=0x1,ldlat=3\n")
    (cpu / "events" / "topdown-be").write_text("event=0x1a4,umask=0x02\n")
    monkeypatch.setattr(counters, "PMUS", tmp_path)
    return tmp_path


def test_generic_names() -> None:
    assert counter_config("context-switches") == (1, 3)
    assert counter_config("cycles") == (0, 0)


def test_raw_fields_land_where_the_format_says(pmus: Path) -> None:
    assert counter_config("cpu/event=0x3c,umask=0x2/") == (4, 0x023C)
    # An event number wider than its first range goes on into the next one.
    assert counter_config("cpu/event=0x1a4/") == (4, 0xA4 | (0x1 << 32))
    assert counter_config("cpu/topdown-be/") == (4, 0xA4 | (0x1 << 32) | (0x02 << 8))
    assert counter_config("cpu/topdown-be,cmask=1/") == (4, 0xA4 | (1 << 32) | (2 << 8)
                                                         | (1 << 24))


@pytest.mark.parametrize(("spec", "said"), [
    ("gpu/x/", "this machine has no PMU 'gpu' (its PMUs: cpu)"),
    ("cpu/nope/", "PMU cpu has no event 'nope' (its events: mem-loads, topdown-be)"),
    ("cpu/colour=1/", "PMU cpu has no field 'colour' (its fields: cmask, event, ldlat, umask)"),
    ("cpu/umask=0x100/", "umask=0x100 does not fit its 8 bits"),
    ("cpu/umask=lots/", "umask=lots is not a number"),
    ("cpu/mem-loads/", "field ldlat is in config1, and only fields of config are read"),
    ("cpu/event=1", "write a PMU's event as PMU/EVENT/ or PMU/FIELD=VALUE,.../"),
    ("cycle", "unknown counter 'cycle'"),
])
def test_bad_events_are_one_sentence(pmus: Path, spec: str, said: str) -> None:
    with pytest.raises(ProfinferError) as err:
        counter_config(spec)
    assert said in str(err.value) and "\n" not in str(err.value)


def test_the_pmus_and_their_named_events(pmus: Path) -> None:
    (pmus / "software").mkdir()
    (pmus / "software" / "type").write_text("1\n")
    assert counters.pmu_events() == {"cpu": ["mem-loads", "topdown-be"], "software": []}
