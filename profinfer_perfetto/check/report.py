"""How `check` reports: a table for people, JSON, JUnit XML and GitHub Actions annotations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO
from xml.etree import ElementTree as ET

from profinfer_perfetto.check.baseline import PER_STEP, shown
from profinfer_perfetto.check.verdict import REGRESSION, UNDECIDED, CheckResult, Verdict
from profinfer_perfetto.errors import ProfinferError


def _row(v: Verdict) -> list[str]:
    c = v.change
    noise = "" if v.noise is None else f"±{v.noise:.1%}"
    if c is None:
        return [v.key, "", "", "", "", f"{v.rule.max_change:+.0%}", noise, v.verdict]
    mean = v.rule.by_mean
    return [v.key, shown(v.key, c.base), shown(v.key, c.new),
            f"{c.change:+.1%}{' of a step' if mean else ''}",
            "" if mean else f"{c.low:+.1%} .. {c.high:+.1%}", f"{v.rule.max_change:+.0%}", noise,
            v.verdict]


def table(result: CheckResult, out: TextIO) -> None:
    header = ["key", "base", "new", "change", "interval", "limit", "runs stray",
              "verdict"]
    rows = [header] + [_row(v) for v in result.verdicts]
    widths = [max(len(r[j]) for r in rows) for j in range(len(header))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    for w in result.warnings:
        out.write(f"warning: {w}\n")
    failed = [v for v in result.verdicts if v.failed]
    out.write(f"{len(failed)} regression(s) in {len(result.verdicts)} checks\n" if failed
              else f"no regression in {len(result.verdicts)} checks\n")


def as_json(result: CheckResult, out: TextIO) -> None:
    doc = {
        "failed": result.failed,
        "warnings": result.warnings,
        "verdicts": [
            {"rule": v.rule.name, "key": v.key, "verdict": v.verdict, "base_samples": v.base_n,
             "new_samples": v.new_n, "max_change": v.rule.max_change, "noise": v.noise,
             "unit": "ppm" if v.key.split("/")[0] in PER_STEP else "ns",
             "statistic": v.rule.statistic,
             **({"base": v.change.base, "new": v.change.new, "change": v.change.change,
                 "interval": None if v.rule.by_mean else [v.change.low, v.change.high]}
                if v.change else {})}
            for v in result.verdicts
        ],
    }
    json.dump(doc, out, indent=1)
    out.write("\n")


def junit(result: CheckResult, path: Path) -> None:
    suite = ET.Element("testsuite", name="profinfer-perfetto check",
                       tests=str(len(result.verdicts)),
                       failures=str(sum(v.failed for v in result.verdicts)),
                       skipped=str(sum(v.verdict == UNDECIDED for v in result.verdicts)))
    for v in result.verdicts:
        case = ET.SubElement(suite, "testcase", classname=v.rule.name, name=v.key)
        if v.failed:
            ET.SubElement(case, "failure", message=v.sentence(), type=REGRESSION)
        elif v.verdict == UNDECIDED:
            ET.SubElement(case, "skipped", message=v.sentence())
    for w in result.warnings:
        ET.SubElement(suite, "system-err").text = w
    try:
        ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)
    except OSError as exc:
        raise ProfinferError(f"cannot write {path}: {exc.strerror}") from None


def _data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (escapeData)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A workflow command's property value (title=...), escaped (escapeProperty)."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _command(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={_property(title)}::{_data(message)}\n"


def github(result: CheckResult, out: TextIO) -> None:
    """Workflow commands: an error per regression, a warning per warning and undecided key."""
    for v in result.verdicts:
        if v.failed:
            out.write(_command("error", f"profinfer-perfetto: {v.key} slower", v.sentence()))
        elif v.verdict == UNDECIDED:
            out.write(_command("warning", f"profinfer-perfetto: {v.key}", v.sentence()))
    for w in result.warnings:
        out.write(_command("warning", "profinfer-perfetto", w))
