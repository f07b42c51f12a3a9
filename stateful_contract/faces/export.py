"""A report for other CI systems: JUnit XML, and Markdown for a job summary or a pull-request comment.

Both have one entry per clause that ran (clauses not selected are left out, as pytest's
JUnit XML leaves out deselected tests); in JUnit XML a declared expected failure and a
clause not judged are ``<skipped>``, as pytest writes an xfail and a skip.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from ..report.render import (
    SHOWN,
    coverage_line,
    plural,
    policy_words,
    ran,
    render_result,
    summary_line,
    title,
)
from ..report.results import Report
from ..repro.advice import advisories
from ..search.coverage import POINT_PREFIX
from ..terms import gap_words, shape_words

__all__ = ["junit_xml", "markdown_summary", "write_junit", "write_markdown"]


def junit_xml(report: Report) -> str:
    """The report as JUnit XML: one testsuite, one testcase per clause that ran."""
    results = [r for r, _ in ran(report)]
    failures = sum(r.is_failure for r in results)
    skipped = sum(r.status in ("expected-failure", "not-judged") for r in results)
    seconds = f"{sum(r.seconds for r in results):.3f}"
    counts = {"tests": str(len(results)), "failures": str(failures), "errors": "0", "skipped": str(skipped),
              "time": seconds}
    suites = ET.Element("testsuites", {"name": title(report), **counts})
    suite = ET.SubElement(suites, "testsuite", {"name": f"{title(report)}: {report.target}", **counts})
    properties = ET.SubElement(suite, "properties")
    for name, value in (("target", report.target), ("profile", report.profile),
                        ("seed", "derandomized" if report.seed is None else str(report.seed)),
                        ("world_size", str(report.world_size)),
                        ("checkpoint_alignment", report.checkpoint_alignment or "none"),
                        ("coverage", coverage_line(report).removeprefix("coverage: ") or "none"),
                        ("not_judged", gap_words(report.gaps) or "none")):  # what a pass does not cover
        ET.SubElement(properties, "property", {"name": name, "value": value})
    for r, same_as in ran(report):
        case = ET.SubElement(suite, "testcase", {"classname": report.target, "name": f"{r.id} {r.name}",
                                                 "time": f"{r.seconds:.3f}"})
        if r.is_failure:
            failure = ET.SubElement(case, "failure", {"message": summary_line(r, same_as) or r.status,
                                                      "type": r.status})
            failure.text = render_result(r)
        elif r.status == "expected-failure":
            ET.SubElement(case, "skipped", {"type": "xfail",
                                            "message": f"expected failure: {r.expected_failure_reason or ''}"})
        elif r.status == "not-judged":
            ET.SubElement(case, "skipped", {"message": f"not judged: {r.message}"})
        if r.coverage:
            out = ET.SubElement(case, "system-out")
            out.text = ", ".join(f"{k}: {v}" for k, v in r.coverage.items() if not k.startswith(POINT_PREFIX))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def write_junit(report: Report, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(junit_xml(report), encoding="utf-8")


#: How a status reads in the Markdown table.
_MARK = {"passed": "✅ passed", "failed": "❌ FAILED", "unexpected-pass": "❌ XPASS (stale expected failure)",
         "expected-failure": "⚠️ xfail", "not-judged": "⏭️ not judged"}


def _cell(text: str) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|")


def _code(text: str, language: str = "") -> str:
    """A fenced code block that the text cannot close early."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}"


def markdown_summary(report: Report) -> str:
    """The report in GitHub-flavoured Markdown: verdict, one row per clause that ran, the failures."""
    walk = ran(report)
    failing = [(r, same_as) for r, same_as in walk if r.is_failure]
    gap = gap_words(report.gaps)  # a pass that does not cover them says so
    verdict = {"pass": "✅ pass" + (f" ({gap})" if gap else ""), "fail": f"❌ fail ({plural(len(failing), 'clause')})",
               "not-judged": "⏭️ not judged (no clause came to a verdict: nothing is known to hold)",
               "interrupted": f"⏹️ interrupted (a partial report; {plural(len(failing), 'clause')} failed)"}[report.verdict]
    target = report.target.replace("`", "'")
    lines = [f"### {title(report)}: `{target}`: {verdict}", ""]
    facts = [f"profile `{report.profile}`", "derandomized" if report.seed is None else f"seed `{report.seed}`"]
    if report.world_size > 1:
        facts.append(f"{report.world_size} ranks")
    if report.checkpoint_alignment:  # the declared checkpoint policy
        facts.append(policy_words(report.checkpoint_alignment))
    if report.trainer_shape:  # the declared trainer's shape
        facts.append(f"declared {shape_words(report.trainer_shape)}")
    if report.consume:
        facts.append(f"batches drawn through `{report.consume}(loader)`, states from the loader")
    if report.endless:
        facts.append("endless stream (" + ("declared" if report.endless == "declared" else "found") + "): "
                     "checked as one stream, the clauses that need a pass to end not judged")
    lines += [", ".join(facts), "", "| clause | status | time | detail |", "| --- | --- | ---: | --- |"]
    for r, same_as in walk:
        lines.append(f"| {r.id} {_cell(r.name)} | {_MARK.get(r.status, SHOWN[r.status])} | {r.seconds:.2f} s | "
                     f"{_cell(summary_line(r, same_as))} |")
    lines.append("")
    if coverage_line(report):
        lines += [f"Search {coverage_line(report)}.", ""]
    for note in report.notes:
        lines += [f"> note: {_cell(note)}", ""]
    for r, _ in walk:  # under a passing clause too: the clause holds, and its user has something to fix
        lines += [f"> advisory ({r.id}): {_cell(advice)}" for advice in advisories(r.notes)]
        lines += [""] if advisories(r.notes) else []
    for r, same_as in failing:
        if same_as:  # one cause, one story: told in full under the first clause it failed
            lines += [f"#### ❌ {r.id} {r.name}: same cause as {same_as}", "",
                      f"Its own reproduction is in the JSON report (`stateful-contract replay REPORT.json {r.id}`).",
                      ""]
            continue
        lines += [f"#### ❌ {r.id} {r.name}", ""]
        if r.impact is not None:
            lines += [f"**Impact: {r.impact.describe()}**", ""]
        lines += [_code(r.message or r.status, "text"), ""]
        lines += [f"- note: {_cell(n)}" for n in r.notes] + ([""] if r.notes else [])
        if r.reproduction:
            lines += ["Reproduce:", "", _code(r.reproduction, "python"), ""]
        if r.config:
            lines += [f"Replay: `stateful-contract replay REPORT.json {r.id}` (config `{r.config}`)", ""]
    return "\n".join(lines)


def write_markdown(report: Report, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(markdown_summary(report), encoding="utf-8")
