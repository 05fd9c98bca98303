"""How `check` reports: a table for people, JSON, JUnit XML and GitHub Actions annotations; each
after the verdicts, the graph diff (check/graph.py), when it was made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO
from xml.etree import ElementTree as ET

from profinfer_perfetto.check.baseline import PER_STEP, shown
from profinfer_perfetto.check.graph import NOT_COMPARED, GraphDiff
from profinfer_perfetto.check.rules import percent
from profinfer_perfetto.check.verdict import REGRESSION, UNDECIDED, CheckResult, Verdict
from profinfer_perfetto.errors import ProfinferError

LISTED_CHANGES = 20
"""The graph's changes the table and an annotation list (the JSON and JUnit list them all)."""


def _row(v: Verdict) -> list[str]:
    c = v.change
    noise = "" if v.noise is None else f"±{v.noise:.1%}"
    if c is None:
        return [v.key, "", "", "", "", percent(v.rule.max_change), noise, v.verdict]
    mean = v.rule.by_mean
    return [v.key, shown(v.key, c.base), shown(v.key, c.new),
            f"{c.change:+.1%}{' of a step' if mean else ''}",
            "" if mean else f"{c.low:+.1%} .. {c.high:+.1%}", percent(v.rule.max_change), noise,
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
    if result.graph is not None:
        out.write("".join(f"{line}\n" for line in _graph_lines(result.graph)))


def _graph_lines(graph: GraphDiff) -> list[str]:
    """The graph diff's sentence, then its first LISTED_CHANGES changes, indented."""
    listed = [f"  {c.sentence()}" for c in graph.changes[:LISTED_CHANGES]]
    more = len(graph.changes) - LISTED_CHANGES
    return [graph.sentence(), *listed,
            *([f"  and {more} more (--format json lists them all)"] if more > 0 else [])]


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
        "graph": None if (g := result.graph) is None else {
            "verdict": g.verdict, "sentence": g.sentence(), "run": g.run or None,
            "facts": g.facts, "note": g.note or None,
            "changes": [c.as_dict() for c in g.changes]},
    }
    json.dump(doc, out, indent=1)
    out.write("\n")


def junit(result: CheckResult, path: Path) -> None:
    """A testcase per verdict, and one named `graph` for the graph diff (a failure where the
    graph changed, its changes as the failure's text; skipped where not compared)."""
    g = result.graph
    suite = ET.Element("testsuite", name="profinfer-perfetto check",
                       tests=str(len(result.verdicts) + (g is not None)),
                       failures=str(sum(v.failed for v in result.verdicts)
                                    + (g is not None and g.changed)),
                       skipped=str(sum(v.verdict == UNDECIDED for v in result.verdicts)
                                   + (g is not None and g.verdict == NOT_COMPARED)))
    for v in result.verdicts:
        case = ET.SubElement(suite, "testcase", classname=v.rule.name, name=v.key)
        if v.failed:
            ET.SubElement(case, "failure", message=v.sentence(), type=REGRESSION)
        elif v.verdict == UNDECIDED:
            ET.SubElement(case, "skipped", message=v.sentence())
    if g is not None:
        case = ET.SubElement(suite, "testcase", classname="graph", name="graph")
        if g.changed:
            ET.SubElement(case, "failure", message=g.sentence(), type=g.verdict).text = "".join(
                f"{c.sentence()}\n" for c in g.changes)
        elif g.verdict == NOT_COMPARED:
            ET.SubElement(case, "skipped", message=g.sentence())
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
    """Workflow commands: an error per regression, a warning per warning and undecided key;
    an error where the graph changed, a warning where it was not compared."""
    for v in result.verdicts:
        if v.failed:
            out.write(_command("error", f"profinfer-perfetto: {v.key} slower", v.sentence()))
        elif v.verdict == UNDECIDED:
            out.write(_command("warning", f"profinfer-perfetto: {v.key}", v.sentence()))
    for w in result.warnings:
        out.write(_command("warning", "profinfer-perfetto", w))
    g = result.graph
    if g is not None and g.changed:
        out.write(_command("error", "profinfer-perfetto: the graph changed",
                           "\n".join(_graph_lines(g))))
    elif g is not None and g.verdict == NOT_COMPARED:
        out.write(_command("warning", "profinfer-perfetto: graph", g.sentence()))
