"""How results read, in one place: the CLI, the pytest face, the demo and the rank entry use it.

Everything is rendered from the structured fields of a `ClauseResult` (what was expected, what
came instead, where, on which rank), never parsed back out of a message.
"""

from __future__ import annotations

import textwrap
from typing import TextIO

from ..repro.advice import advisories
from ..search.coverage import describe_coverage, describe_space
from ..terms import (  # re-exported: the faces' words, light for the badge
    NOT_ON_ENDLESS,
    gap_words,
    policy_words,
    saves_after_iter,
    title,
)
from .results import ClauseResult, Report, same_causes

__all__ = ["SHOWN", "coverage_line", "endless_line", "impact_text", "not_judged_verdict", "plural", "policy_words", "ran", "render_failures", "render_report", "render_result",
           "story", "summary_line", "title"]

#: How the statuses read in a terminal.
SHOWN = {"passed": "passed", "failed": "FAILED", "expected-failure": "xfail", "unexpected-pass": "XPASS",
         "not-judged": "not judged", "skipped": "skipped"}


def plural(count: int, noun: str) -> str:
    """``1 example``, ``2 examples``: a count and its noun, in the number it takes."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def ran(report: Report) -> list[tuple[ClauseResult, str | None]]:
    """The one walk every face takes: each clause that ran, with the clause whose failure has the
    same cause (`same_causes`), None when it has its own."""
    same = same_causes(report.results)
    return [(r, same.get(r.id)) for r in report.results if r.status != "skipped"]


def impact_text(result: ClauseResult) -> str:
    """``silent: 1 sample lost in epoch 0``: what the failure does to a run ("" when unknown)."""
    return result.impact.describe() if result.impact is not None else ""


def story(result: ClauseResult, same_as: str | None) -> str:
    """A failure in a few words: the clause whose cause it shares, or what it does to a run."""
    return f"same cause as {same_as}" if same_as else impact_text(result)


def summary_line(result: ClauseResult, same_as: str | None = None) -> str:
    """One line for a result: what it does to a run, then what came instead; the declared reason,
    or the example count. ``same_as``: the clause whose failure has the same cause."""
    if result.status in ("failed", "unexpected-pass", "not-judged"):
        text = result.got or result.message
        line = next((part for part in text.splitlines() if part.strip()), "")
        if result.rank is not None:
            line = f"rank {result.rank}: {line}"
        if same_as is not None:
            line = f"same cause as {same_as}"
        if result.status == "failed" and impact_text(result):
            line = f"{impact_text(result)}; {line}"
    elif result.status == "expected-failure":
        line = f"declared: {result.expected_failure_reason}"
    elif result.examples:
        line = plural(result.examples, "example")
    else:
        line = ""
    return line if len(line) <= 100 else line[:97] + "..."


def render_result(result: ClauseResult) -> str:
    """A failing clause in full: the rule, what happened, the notes, how to reproduce it."""
    lines = [result.heading or f"{result.id} {result.name}"]
    if result.is_failure and impact_text(result):
        lines.append(f"Impact: {impact_text(result)}")  # first: what a user triages by
    lines.extend(result.body.splitlines())
    lines.extend(f"note: {n}" for n in result.notes)
    if result.reproduction:
        lines += ["", "Reproduce:", textwrap.indent(result.reproduction, "    ")]
    return "\n".join(lines)


def endless_line(report: Report) -> str:
    """``endless stream (found): ...``: how the loader was checked, when its passes never end ("" otherwise)."""
    if not report.endless:
        return ""
    how = "declared" if report.endless == "declared" else "found: its first pass never ended"
    left = [r.id for r in report.results if r.status == "not-judged" and r.unjudged == "endless-only"]
    gaps = gap_words([gap for gap in report.gaps if gap[1] == "endless"])
    return (f"endless stream ({how}): checked as one stream, resumes compared over two epochs of the dataset "
            "past each checkpoint" + (f"; {', '.join(left)} {NOT_ON_ENDLESS}" if left else "")
            + (f"; {gaps}" if gaps else ""))


def coverage_line(report: Report) -> str:
    """What the search covered, over every clause, in one line ("" when nothing was searched)."""
    counts = report.coverage
    if not counts:
        return ""
    seed = "derandomized" if report.seed is None else f"seed {report.seed}"
    line = f"coverage: {describe_coverage(counts)} ({seed})"
    if report.num_workers and not report.endless:  # the share of the (epoch-relative) checkpoint space
        line += "; " + describe_space(counts, report.num_workers, report.checkpoint_alignment,
                                      after_iter=saves_after_iter(report.trainer_shape))
    return line


def render_report(report: Report, out: TextIO) -> None:
    """One line per clause, the verdict, then what failed with its reproduction."""
    out.write(f"{title(report)}: {report.target} (profile {report.profile}"
              + (f", {report.world_size} ranks" if report.world_size > 1 else "") + ")\n")
    if report.checkpoint_alignment:  # the declared checkpoint policy: where the loader was checked
        out.write(f"  declared checkpoint policy: {policy_words(report.checkpoint_alignment)} ("
                  + {"epoch": "after each pass's StopIteration", "window": "every grad_acc_step batches"}.get(
                      report.checkpoint_alignment, "within each epoch, and at its end") + ")\n")
    if report.consume:
        out.write(f"  declared consumption: batches drawn through {report.consume}(loader), "
                  "states from loader.state_dict()\n")
    if report.endless:
        out.write(f"  {endless_line(report)}\n")
    for r, same_as in ran(report):
        out.write(f"  {r.id + ' ' + r.name:<45} {SHOWN[r.status]:<10} {r.seconds:6.2f} s  "
                  f"{summary_line(r, same_as)}\n")
        for advice in advisories(r.notes):  # shown whatever the status: a pass can need a fix too
            out.write(f"    advisory: {advice}\n")
    if coverage_line(report):
        out.write(f"  {coverage_line(report)}\n")
    for note in report.notes:
        out.write(f"  note: {note}\n")
    failing = [r for r in report.results if r.is_failure]
    if report.interrupted:
        judged = sum(r.status not in ("skipped", "not-judged") for r in report.results)
        out.write(f"Verdict: INTERRUPTED ({judged} clause{'s' if judged != 1 else ''} judged before the stop"
                  + (f"; failed: {', '.join(r.id for r in failing)}" if failing else "") + ")\n")
    elif not failing and report.judged_nothing:
        out.write(not_judged_verdict(report) + "\n")
        return
    elif not failing:
        deviations = report.deviations
        extra = f" with declared deviations: {', '.join(deviations)}" if deviations else ""
        gap = gap_words(report.gaps)  # a pass that does not cover them says so
        out.write(f"Verdict: PASS{extra}{f' ({gap})' if gap else ''}\n")
        return
    else:
        out.write(f"Verdict: FAIL ({len(failing)} clause{'s' if len(failing) != 1 else ''}: "
                  f"{', '.join(r.id for r in failing)})\n")
    render_failures(report, out)


def not_judged_verdict(report: Report) -> str:
    """The verdict of a run that judged nothing, with each clause's reason: it is no pass."""
    why = [f"{r.id}: {r.got or r.message}" for r, _ in ran(report)]
    return ("Verdict: NOT JUDGED (no clause came to a verdict, so nothing is known to hold"
            + (": " + "; ".join(why) if why else "; no clause ran") + ")")


def render_failures(report: Report, out: TextIO, label: str = "") -> None:
    """Each failure in full, except one whose cause an earlier one shares: that one in a line.

    One cause, one story: MindSpeed-MM's wrapper fails six resume clauses on one minimal
    example with one difference, and six copies of it would hide the other failures.
    """
    told = True  # the previous failure was told in full: a blank line before the next
    for r, same_as in ran(report):
        if not r.is_failure:
            continue
        if same_as:
            out.write(("\n" if told else "") + f"--- {label}{r.id} {r.name}: same cause as {same_as} (its own "
                      "reproduction is in the JSON report) ---\n")
        else:
            out.write(f"\n--- {label}{r.id} {r.name} ---\n{render_result(r)}\n")
        told = same_as is None
