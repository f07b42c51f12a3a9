"""The contract badge: a report turned into a self-contained SVG and a shields.io endpoint file.

What it says, and why its colour follows the core verdict only, is docs/badge.md. Everything
here is a pure function of a `Report` except `write_badge` and `run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from html import escape as html_escape
from pathlib import Path
from typing import Any

from ..report.results import JUDGED_STATUSES, ClauseResult, Report
from ..terms import TIERS, policy_words, shape_words, title  # not report.render: a badge reads without torch

__all__ = ["add_arguments", "badge_color", "badge_label", "badge_message", "endpoint_json", "impact_hint",
           "render_svg", "run", "svg_badge", "text_width", "write_badge"]

#: shields.io's named colours, so the SVG and the endpoint badge look the same.
COLORS: dict[str, str] = {"brightgreen": "#4c1", "yellowgreen": "#a4a61d", "red": "#e05d44",
                          "lightgrey": "#9f9f9f"}

#: At most this many clause IDs are named on a passing badge's deviations, the rest counted ("+2").
MAX_NAMED_CLAUSES = 5
#: A failing badge names its first failing clause and counts the rest ("failing SC02 +7"): naming five
#: and the count besides drew MindSpeed-MM's wrapper 682 px wide, too wide for a README's badge row;
#: which clauses failed is the report's to list.
MAX_NAMED_FAILING = 1

#: Tiers whose verdict decides the colour (`TIERS`: ``on_badge``); the others (the strict
#: tier, beyond StatefulDataLoader) are only mentioned in the text.
CORE_TIERS = frozenset(t.name for t in TIERS.values() if t.on_badge)
_MENTIONED_TIERS = frozenset(TIERS) - CORE_TIERS

# Advance widths in pixels of Verdana at 11px for printable ASCII (32..126), the font and
# size shields.io measures badge text with; one row per 16 characters starting at " ".
_VERDANA_11 = (
    3.87, 4.33, 5.05, 9.0, 6.99, 11.84, 7.99, 2.95, 5.0, 5.0, 6.99, 9.0, 4.0, 5.0, 4.0, 5.0,
    6.99, 6.99, 6.99, 6.99, 6.99, 6.99, 6.99, 6.99, 6.99, 6.99, 5.0, 5.0, 9.0, 9.0, 9.0, 6.0,
    11.0, 7.52, 7.54, 7.68, 8.48, 6.96, 6.32, 8.53, 8.27, 4.63, 5.0, 7.62, 6.12, 9.27, 8.23, 8.66,
    6.63, 8.66, 7.65, 7.52, 6.78, 8.05, 7.52, 10.88, 7.54, 6.77, 7.54, 5.0, 5.0, 5.0, 9.0, 6.99,
    6.99, 6.61, 6.85, 5.73, 6.85, 6.55, 3.87, 6.85, 6.96, 3.02, 3.79, 6.51, 3.02, 10.7, 6.96, 6.68,
    6.85, 6.85, 4.69, 5.73, 4.33, 6.96, 6.51, 9.0, 6.51, 6.51, 5.78, 6.98, 5.0, 6.98, 9.0,
)
#: Width assumed for characters outside the table: as wide as "W", so text never overflows.
_WIDEST = 10.88


def escape(text: str) -> str:
    """``&``, ``<`` and ``>`` escaped for SVG text and attributes in double quotes (what ``xml.sax.saxutils.escape``
    does, without its import of ``urllib.request``, half a second on a badge's start)."""
    return html_escape(text, quote=False)


def text_width(text: str) -> float:
    """Rendered width of ``text`` in Verdana 11px, in pixels (an estimate, as shields.io makes)."""
    return sum(_VERDANA_11[ord(ch) - 32] if 32 <= ord(ch) <= 126 else _WIDEST for ch in text)


def badge_label(report: Report) -> str:
    """``StatefulLoader contract v1``: which contract, which version of it."""
    return title(report)


def _ran(report: Report, tiers: frozenset[str]) -> list[ClauseResult]:
    return [r for r in report.results if r.tier in tiers and r.status != "skipped"]


def _named(ids: list[str], most: int = MAX_NAMED_CLAUSES) -> str:
    shown = ", ".join(ids[:most])
    return shown if len(ids) <= most else f"{shown} +{len(ids) - most}"


#: A silent failure's hint, by the first of its impact's counts that is not zero.
_SILENT_HINTS = ((("lost", "epochs lost"), "silent data loss"), (("repeated",), "silently repeats data"),
                 (("reordered",), "silently reorders data"))


def _hint(result: ClauseResult) -> str:
    impact = result.impact
    if impact is None:
        return ""
    if impact.kind == "loud":
        return {"save": "crashes at save", "build": "crashes at start"}.get(impact.where, "crashes on resume")
    for counted, hint in _SILENT_HINTS:
        if any(impact.counts.get(key) for key in counted):
            return hint
    return "silently breaks state" if impact.what.startswith("state unusable") else "silent data change"


def impact_hint(results: list[ClauseResult]) -> str:
    """What the failures do to a training run, in two hints at most: ``crashes on resume, silent data loss``."""
    hints: list[str] = []
    for r in sorted(results, key=lambda r: r.impact is None or r.impact.kind != "loud"):  # loud first
        hint = _hint(r)
        if hint and hint not in hints:
            hints.append(hint)
    return ", ".join(hints[:2])


def badge_message(report: Report) -> str:
    """The verdict in a few words; docs/badge.md lists the forms it takes."""
    core = _ran(report, CORE_TIERS)
    if report.interrupted:
        return "interrupted"
    if not core:
        return "not run"
    failing = [r.id for r in core if r.is_failure]
    if failing:
        hint = impact_hint([r for r in core if r.is_failure])
        return (f"failing {_named(failing, MAX_NAMED_FAILING)}" + (f": {hint}" if hint else "")
                + (", endless stream" if report.endless else ""))
    if not any(r.status in JUDGED_STATUSES for r in core):
        return "not judged"  # no core clause came to a verdict: nothing is known to pass
    message = "passing"
    deviations = [r.id for r in core if r.status == "expected-failure"]
    if deviations:
        message += " except " + _named(deviations)
    if report.checkpoint_alignment:  # the declared checkpoint policy
        message += ", " + policy_words(report.checkpoint_alignment)
    if report.trainer_shape:  # the declared trainer's shape: a clause it waives was not judged
        message += ", " + shape_words(report.trainer_shape)
    # The gaps, the strict tier's too: named, though only the core's set the colour.
    if report.endless:  # what was judged: one endless stream, not epochs, and what that left unjudged
        gaps = report.not_judged_on_endless
        message += ", endless stream" + (f" ({_named(gaps)} not judged)" if gaps else "")
    strict = _ran(report, _MENTIONED_TIERS)
    if strict:
        message += ", fails strict" if any(r.is_failure for r in strict) else " + strict"
    others = [clause_id for clause_id, why in report.gaps if why != "endless"]
    if others:
        message += f", {_named(others)} not judged"
    return message


def badge_color(report: Report) -> str:
    """A shields.io colour name: red on a core failure, yellow-green with deviations."""
    core = _ran(report, CORE_TIERS)
    if not core or report.interrupted or not any(r.status in JUDGED_STATUSES for r in core):
        return "lightgrey"
    if any(r.is_failure for r in core):
        return "red"
    if (report.checkpoint_alignment is not None or report.trainer_shape
            or any(r.status == "expected-failure" for r in core)
            or any(r.is_gap for r in core)):  # a pass that does not cover them
        return "yellowgreen"
    return "brightgreen"


def endpoint_json(report: Report) -> dict[str, Any]:
    """The shields.io endpoint document (https://shields.io/badges/endpoint-badge)."""
    return {"schemaVersion": 1, "label": badge_label(report), "message": badge_message(report),
            "color": badge_color(report)}


def render_svg(report: Report) -> str:
    """The badge as a standalone SVG in shields.io's flat style."""
    return svg_badge(badge_label(report), badge_message(report), badge_color(report))


def svg_badge(label: str, message: str, color: str) -> str:
    """A flat two-part badge; ``color`` is a shields.io colour name or a ``#rgb`` value."""
    fill = COLORS.get(color, color)
    # shields.io rounds text widths up to an odd number so the text centres on a pixel.
    label_text, message_text = (round(text_width(text)) | 1 for text in (label, message))
    # 5px of padding either side of each text, as shields.io does.
    left, right = label_text + 10, message_text + 10
    total = left + right
    title = escape(f"{label}: {message}")
    # Text is drawn at 10x size and scaled down by 0.1 for sub-pixel placement.
    texts = []
    for text, width, x in ((label, label_text, left / 2), (message, message_text, left + right / 2)):
        body = escape(text)
        for y, extra in ((150, ' fill="#010101" fill-opacity=".3" aria-hidden="true"'), (140, "")):
            texts.append(f'<text x="{x * 10:.0f}" y="{y}" transform="scale(.1)" '
                         f'textLength="{width * 10}"{extra}>{body}</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="20" role="img" '
            f'aria-label="{title}"><title>{title}</title>'
            '<linearGradient id="s" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/>'
            '<stop offset="1" stop-opacity=".1"/></linearGradient>'
            f'<clipPath id="r"><rect width="{total}" height="20" rx="3" fill="#fff"/></clipPath>'
            f'<g clip-path="url(#r)"><rect width="{left}" height="20" fill="#555"/>'
            f'<rect x="{left}" width="{right}" height="20" fill="{escape(fill)}"/>'
            f'<rect width="{total}" height="20" fill="url(#s)"/></g>'
            '<g fill="#fff" text-anchor="middle" font-family="Verdana,Geneva,DejaVu Sans,sans-serif" '
            'text-rendering="geometricPrecision" font-size="110">' + "".join(texts) + "</g></svg>\n")


def write_badge(report: Report, *, svg: str | Path | None = None, endpoint: str | Path | None = None) -> None:
    """Write the SVG and/or the endpoint JSON, creating parent directories."""
    endpoint_text = json.dumps(endpoint_json(report), indent=2) + "\n"
    for path, text in ((svg, render_svg(report)), (endpoint, endpoint_text)):
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", type=Path, help="a JSON report written by `check` or --contract-report")
    parser.add_argument("--svg", type=Path, metavar="PATH", help="write a self-contained SVG badge here")
    parser.add_argument("--endpoint", type=Path, metavar="PATH", help="write a shields.io endpoint JSON here")


def run(args: argparse.Namespace) -> int:
    """``stateful-contract badge``: 0 when written (a failing badge is a badge too), 2 when the report cannot
    be read. With neither ``--svg`` nor ``--endpoint`` the endpoint JSON goes to standard output."""
    try:
        report = Report.from_json(args.report)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"stateful-contract badge: cannot read report {str(args.report)!r}: {exc}", file=sys.stderr)
        return 2
    if args.svg is None and args.endpoint is None:
        print(json.dumps(endpoint_json(report), indent=2))
    write_badge(report, svg=args.svg, endpoint=args.endpoint)
    for path in filter(None, (args.svg, args.endpoint)):
        print(f"wrote {path}")
    return 0
