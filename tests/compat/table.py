"""Run the compatibility matrix and write docs/compatibility.md, with one badge per row.

Every verdict on the page comes from a run made when the page was written: nothing is
typed in by hand. A row whose package does not import here is listed with the reason.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import platform
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stateful_contract.faces.badge import impact_hint, svg_badge

from .page import EARLIER, KeptRow, kept_rows
from .rows import ROWS, Row, missing

__all__ = ["Measured", "main", "measure", "render"]

#: The clauses shown as columns, in order; the multi-rank ones apply only to rows on 2 ranks.
COLUMNS = ("SC01", "SC02", "SC03", "SC10", "SC11", "SC12", "SC13", "SC14", "SC15", "SC16", "SC17", "SC18",
           "SC19", "SC20", "SC21", "SC22", "SC23", "SC30", "SC31")
#: How each status is shown in the clause table.
MARKS = {"passed": "pass", "expected-failure": "**fail**", "failed": "**FAIL (new)**",
         "unexpected-pass": "**PASS (stale)**", "not-judged": "n/j", "skipped": "–"}


@dataclass
class Measured:
    """One row's outcome: its report (None when it could not run), why not, and how long it took."""

    row: Row
    report: Any = None
    why_not: str | None = None
    seconds: float = 0.0
    version: str = ""
    #: The day it was measured (ISO): today for a row this run measured, the saved day for one loaded.
    measured: str = field(default_factory=lambda: datetime.date.today().isoformat())

    @property
    def ok(self) -> bool:
        return self.report is None or bool(self.report.passed)

    def statuses(self) -> dict[str, str]:
        return {} if self.report is None else {r.id: r.status for r in self.report.results}

    def verdict(self) -> str:
        if self.report is None:
            return "not run"
        failing = [i for i, s in self.statuses().items() if s in ("expected-failure", "failed")]
        if not failing:
            return "resumes exactly" if self.ok else "declarations stale"
        return f"fails {', '.join(failing)}"

    def risk(self) -> str:
        """What a user of this loader risks, in one phrase, from the failures' impacts (loud first)."""
        if self.report is None:
            return "not measured"
        failing = [r for r in self.report.results if r.status in ("expected-failure", "failed")]
        if not failing:
            return "nothing measured: resumes exactly"
        told = [r for r in failing if r.impact is not None]
        if not told:  # a report from before format 6
            return "not measured (report without impacts)"
        first = min(told, key=lambda r: r.impact is None or r.impact.kind != "loud")
        assert first.impact is not None
        return f"{impact_hint(told)} ({first.id}: {first.impact.describe()})"

    def badge(self) -> str:
        color = "lightgrey" if self.report is None else ("red" if self.verdict().startswith("fails") else "brightgreen")
        if self.report is not None and not self.ok:
            color = "orange"  # a new failure or a stale declaration: the run itself failed
        return svg_badge(self.row.name, self.verdict(), color)


#: Where each row's report is kept between runs (gitignored), so one row can be re-run
#: and the page re-rendered with the others' last measurements.
REPORTS = Path("reports") / "compat"


def _launch_failed(report: Any) -> bool:
    """The multi-rank run itself died (not a clause): worth one more try (see the report's notes)."""
    return any("the multi-rank run failed" in r.message for r in report.results)


def measure(row: Row, *, profile: str | None = None) -> Measured:
    """Run the contract on one row, with its declared expected failures."""
    from stateful_contract import check

    why_not = missing(row)
    if why_not is not None:
        return Measured(row, why_not=why_not, version=row.version())
    started = time.perf_counter()
    for attempt in (1, 2):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # docs/findings.md, F7
            report = check(row.target, profile=profile or row.profile, space=row.space, world_size=row.world_size,
                           expected_failures=row.expected_failures, target=row.target,
                           **dict(row.declared))  # type: ignore[arg-type]
        if row.world_size == 1 or not _launch_failed(report) or attempt == 2:
            break
        print(f"{row.name}: the multi-rank run died, not a clause; trying once more", flush=True)
    return Measured(row, report, seconds=time.perf_counter() - started, version=row.version())


def _save(m: Measured) -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)
    data = {"seconds": m.seconds, "version": m.version, "why_not": m.why_not, "measured": m.measured,
            "report": None if m.report is None else m.report.to_dict()}
    (REPORTS / f"{m.row.name}.json").write_text(json.dumps(data), encoding="utf-8")


def _load(row: Row) -> Measured | None:
    from stateful_contract import Report

    path = REPORTS / f"{row.name}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    report = None if data["report"] is None else Report.from_dict(data["report"])
    # A report saved before it carried its day was measured when its file was written.
    measured = data.get("measured") or datetime.date.fromtimestamp(path.stat().st_mtime).isoformat()
    return Measured(row, report, data["why_not"], data["seconds"], data["version"], measured)


def _environment(day: str) -> str:
    import torch
    import torchdata

    return (f"Python {platform.python_version()}, torch {torch.__version__}, torchdata {torchdata.__version__}, "
            f"{platform.system()} {platform.machine()}, measured {day}")


def render(measured: list[Measured], *, command: str, kept: Mapping[str, KeptRow] | None = None,
           order: Sequence[str] | None = None) -> str:
    """The page: the summary with badges, every clause of every row, the reasons, the rows not run.

    ``kept`` rows (`tests.compat.page`) are rows not measured by this run, shown with the lines an
    earlier page had for them; ``order`` is the rows' order (default: ``measured``'s)."""
    kept = kept or {}
    ran = {m.row.name: m for m in measured}
    names = [n for n in (order or list(ran)) if n in ran or n in kept]
    entries: list[tuple[Measured | None, KeptRow | None]] = [(ran.get(n), kept.get(n)) for n in names]
    seconds = sum(m.seconds for m in measured) + sum(k.seconds for n, k in kept.items() if n in names and n not in ran)
    ci = [n for n in names if (ran[n].row if n in ran else ROWS[n]).ci]
    # Each row keeps the day it was measured: the page's is its newest rows' day, the others are named with theirs.
    days: dict[str, str] = {}
    for n, (m, k) in zip(names, entries):
        if (dated := m or k) is not None:
            days[n] = dated.measured
    newest = max(days.values(), default=datetime.date.today().isoformat())
    earlier: dict[str, list[str]] = {}
    for n, day in days.items():
        if day != newest:
            earlier.setdefault(day, []).append(f"`{n}`")
    when = (" " + EARLIER + "; ".join(f"{', '.join(rows)} on {day}" for day, rows in sorted(earlier.items())) + "."
            if earlier else "")
    lines = [
        "# Compatibility matrix",
        "",
        "Which real loaders checkpoint and resume like torchdata's `StatefulDataLoader`, measured by",
        "running the contract on each of them. One row per loader configuration; each failure has",
        "a reproduction that uses only torch and the package in [Findings](findings.md), with what",
        "its maintainers would need to change. A row that fails stays here as a declared expected",
        "failure (`tests/compat/rows.py`): the run is strict, so a package that fixes its",
        "bug makes the declaration stale and the run fail, and the page is regenerated.",
        "",
        "Generated by `" + command + "`, which `nox -s matrix` runs after installing the packages; the",
        f"rows' checks took {seconds / 60:.0f} minutes on 2 shared cores. {_environment(newest)}.{when}",
        "Do not edit by hand.",
        "",
        "The acceptance run (`nox -s acceptance`, CI) checks the rows that need nothing beyond this package's own",
        "dependencies, strictly: " + ", ".join(f"`{n}`" for n in ci) + " (about 5",
        "minutes of CPU, tests/evidence/test_compat.py). The others need their package installed and take minutes each:",
        "`nox -s matrix` installs the `compat` group with torch held at its pinned version, runs them all,",
        "and rewrites this page; it fails when a row fails a clause it does not declare or passes one it does.",
        "",
        "## Rows",
        "",
        "| | row | package | configuration | part of the configuration space | verdict | what a user risks | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m, k in entries:
        if m is None:
            lines += [k.summary] if k is not None and k.summary else []
            continue
        r = m.row
        lines.append(f"| ![{r.name}](compat-badges/{r.name}.svg) | `{r.name}` | {r.package} {m.version} | "
                     f"{r.configuration.replace('|', '/')} | {r.space_text()}; profile `{r.profile}` | "
                     f"{m.verdict()} | {m.risk().replace('|', '/')} | {m.seconds:.0f} |")
    lines += ["", "## Every clause", "",
              "`pass`: holds; `**fail**`: a declared, measured failure (reason below); `n/j`: not judged "
              "(SC21 on a loader without `set_epoch`, SC23 with one worker count); `–`: does not apply "
              "(SC30, SC31 need several ranks).", "",
              "| row | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for m, k in entries:
        if m is None:
            lines += [k.clauses] if k is not None and k.clauses else []
        elif m.report is not None:
            st = m.statuses()
            lines.append(f"| `{m.row.name}` | "
                         + " | ".join(MARKS.get(st.get(c, "skipped"), st.get(c, "")) for c in COLUMNS) + " |")
    lines += ["", "## Why each row fails", ""]
    for m, k in entries:
        if m is None:
            lines += [*k.reasons, ""] if k is not None and k.reasons else []
            continue
        if m.report is None or not m.row.expected_failures:
            continue
        lines += [f"### `{m.row.name}`", "", f"Factory: `{m.row.target}`.", ""]
        by_reason: dict[str, list[str]] = {}
        for clause_id, reason in m.row.expected_failures.items():
            by_reason.setdefault(reason, []).append(clause_id)
        lines += [f"- {', '.join(ids)}: {reason}" for reason, ids in by_reason.items()]
        lines += ["", m.row.note, ""] if m.row.note else [""]
    # A row without failures can still need a word (a patched package, what it was built with).
    notes: list[str] = []
    not_run: list[str] = []
    for m, k in entries:
        if m is None:
            notes += [k.note] if k is not None and k.note else []
            not_run += [k.not_run] if k is not None and k.not_run else []
        elif m.report is None:
            not_run.append(f"- `{m.row.name}` ({m.row.package} {m.version}): {m.why_not}."
                           + (f" {m.row.note}" if m.row.note else ""))
        elif not m.row.expected_failures and m.row.note:
            notes.append(f"- `{m.row.name}`: {m.row.note}")
    if notes:
        lines += ["## Notes on rows without declared failures", "", *notes, ""]
    if not_run:
        lines += ["## Rows that could not run here", "", *not_run, ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.compat [--out docs/compatibility.md] [--profile P] [ROW ...]``"""
    parser = argparse.ArgumentParser(prog="python -m tests.compat", description=main.__doc__)
    parser.add_argument("rows", nargs="*", help="rows to run (default: all)")
    parser.add_argument("--out", help="the page to write; '-' prints only (default: docs/compatibility.md "
                        "for a run of every row, '-' for a run of some)")
    parser.add_argument("--profile", help="override every row's profile (default: each row's own)")
    parser.add_argument("--keep-others", action="store_true",
                        help=f"with ROW names: the other rows as last measured ({REPORTS}/), or else as the page "
                        "being rewritten has them")
    args = parser.parse_args(argv)
    logging.getLogger("torchdata.stateful_dataloader.stateful_dataloader").setLevel(logging.ERROR)
    unknown = [n for n in args.rows if n not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    measured = []
    for name in args.rows or list(ROWS):
        m = measure(ROWS[name], profile=args.profile)
        _save(m)
        measured.append(m)
        failing = {r.id: r.status for r in m.report.results if r.is_failure} if m.report is not None else {}
        print(f"{name:32s} {m.verdict()[:70]:70s} {m.seconds:6.0f}s {failing or ''}", flush=True)
    ok = all(m.ok for m in measured)
    kept: dict[str, KeptRow] = {}
    if args.keep_others:
        ran = {m.row.name: m for m in measured}
        loaded = {name: ran.get(name) or _load(row) for name, row in ROWS.items()}
        measured = [m for m in loaded.values() if m is not None]
        page = Path(args.out or "docs/compatibility.md")
        if page.is_file():  # rows with no saved report here: their lines as the page has them
            kept = {n: k for n, k in kept_rows(page.read_text(encoding="utf-8")).items() if loaded.get(n) is None}
    if (args.out or ("-" if args.rows else "docs/compatibility.md")) != "-":
        out = Path(args.out or "docs/compatibility.md")
        badges = out.parent / "compat-badges"
        badges.mkdir(parents=True, exist_ok=True)
        for m in measured:
            (badges / f"{m.row.name}.svg").write_text(m.badge(), encoding="utf-8")
        command = "python -m tests.compat" + (f" --profile {args.profile}" if args.profile else "")
        out.write_text(render(measured, command=command, kept=kept, order=list(ROWS)), encoding="utf-8")
        print(f"wrote {out} and {badges}/")
    return 0 if ok else 1
