"""`profinfer-perfetto doctor`: what this machine offers for recording and querying, with fixes;
given a binary or a PID, also the ggml facts read from its files and where each was read."""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from profinfer_perfetto.analysis.elf import ElfFile
from profinfer_perfetto.analysis.ggml import describe, read_ggml_info
from profinfer_perfetto.analysis.target import objects_of_file, objects_of_process
from profinfer_perfetto.capture.counters import (
    HARDWARE_COUNTERS,
    SOFTWARE_COUNTERS,
    counter_opens,
    pmu_events,
)
from profinfer_perfetto.errors import ExitCode, ProfinferError
from profinfer_perfetto.query.engines import TP_BIN_ENV, find_trace_processor


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _kernel_at_least(major: int, minor: int) -> bool:
    numbers = platform.release().split("-")[0].split(".")
    return (int(numbers[0]), int(numbers[1])) >= (major, minor)


def _bcc_imports() -> bool:
    try:
        import bcc  # noqa: F401
    except ImportError:
        return False
    return True


def checks() -> list[Check]:
    release = platform.release()
    build = Path(f"/lib/modules/{release}/build")
    tracefs = next(
        (p for p in (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
         if (p / "uprobe_events").exists()),
        None,
    )
    try:
        tp_bin, tp_source = find_trace_processor()
    except ProfinferError as exc:
        tp_bin, tp_source = None, str(exc)
    named = [f"{pmu}/{event}/" for pmu, events in pmu_events().items() for event in events]
    sw = [c for c in SOFTWARE_COUNTERS if counter_opens(c)]
    hw = [c for c in HARDWARE_COUNTERS if counter_opens(c)]
    deb = {"aarch64": "arm64"}.get(platform.machine(), "amd64")
    table: list[tuple[str, Callable[[], bool], str, str, bool]] = [
        ("root", lambda: os.geteuid() == 0, "eBPF probes need root", "run with sudo", True),
        ("kernel >= 5.8", lambda: _kernel_at_least(5, 8), f"running {release}",
         "BPF ring buffers and boot-time stamps need Linux 5.8 or newer", True),
        ("BCC", _bcc_imports, "Python module bcc",
         "apt-get install bpfcc-tools python3-bpfcc (and link it into the venv: "
         "scripts/setup.sh does)", True),
        ("kernel headers", build.exists, str(build),
         f"apt-get install linux-headers-{deb} and ln -s /usr/src/linux-headers-*-{deb} {build}",
         True),
        ("tracefs", lambda: tracefs is not None, str(tracefs or "not mounted"),
         "mount -t tracefs nodev /sys/kernel/tracing", True),
        ("uprobe PMU", Path("/sys/bus/event_source/devices/uprobe/type").exists,
         "perf-event uprobes", "a kernel built with CONFIG_UPROBE_EVENTS", True),
        ("objdump", lambda: shutil.which("objdump") is not None,
         "reads function bounds (.eh_frame) to find call sites in",
         "apt-get install binutils", True),
        ("software counters", lambda: bool(sw), ", ".join(sw) or "none",
         "perf events are disabled in this kernel", True),
        ("hardware counters", lambda: bool(hw), ", ".join(hw) or "none (no PMU on this machine)",
         "a machine or VM that exposes its PMU", False),
        ("PMU events", lambda: bool(named), f"{len(named)} by name for --counter PMU/EVENT/"
         + (f": {', '.join(named[:6])}{', ...' if len(named) > 6 else ''}" if named else ""),
         "a machine or VM whose PMUs name their events in /sys/bus/event_source/devices",
         False),
        ("trace_processor", lambda: tp_bin is not None, tp_source,
         f"set {TP_BIN_ENV} to a trace_processor_shell binary (queries use the built-in "
         "engine without one)", False),
    ]
    return [Check(name, test(), detail, fix, required) for name, test, detail, fix, required
            in table]


def facts(objects: list[Path]) -> list[str]:
    """The ggml facts of a target's files, each with the instruction or table it came from."""
    files = [ElfFile(p) for p in dict.fromkeys(objects) if p.exists()]
    info = read_ggml_info(files)
    head = (f"ggml {info.version} (commit {info.commit}, build-id {info.build_id or 'none'}): "
            f"{len(info.ops)} ops, {len(info.unary_ops)} unary ops, {len(info.glu_ops)} GLU ops, "
            f"{len(info.types)} types")
    return [head, *describe(info)]


@dataclass
class DoctorCommand:
    """Report what this machine offers (root, BPF, BCC, headers, counters) and how to fix gaps;
    with a binary or --pid, the ggml facts read from its files and how each was found."""

    target: Path | None = None
    pid: int | None = None

    @staticmethod
    def cli(
        target: Annotated[
            Path | None, typer.Argument(help="Also read the ggml facts of this binary or library.")
        ] = None,
        pid: Annotated[
            int | None, typer.Option(help="Also read the ggml facts of this process.")
        ] = None,
    ) -> int:
        """The options, checked: the command to run."""
        if target is not None and pid is not None:
            raise ProfinferError("give either a binary or --pid, not both")
        return DoctorCommand(target, pid).run()

    def run(self) -> int:
        if self.target is not None:
            print("\n".join(facts(objects_of_file(self.target))))
        elif self.pid is not None:
            print("\n".join(facts(objects_of_process(self.pid, []))))
        results = checks()
        for c in results:
            mark = "ok" if c.ok else ("MISSING" if c.required else "absent")
            line = f"{mark:8} {c.name:18} {c.detail}"
            if not c.ok:
                line += f"\n{'':27} fix: {c.fix}"
            print(line)
        ready = all(c.ok for c in results if c.required)
        print("ready to record" if ready else "not ready to record: see the fixes above")
        return ExitCode.OK if ready else ExitCode.REGRESSION
