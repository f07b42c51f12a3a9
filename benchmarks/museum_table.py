"""Generate docs/museum.md: which clause catches each reported bug of the museum, and what misses it.

    nox -s museum                                             # the same, in nox's own virtualenv
    PYTHONPATH=. python benchmarks/museum_table.py            # writes docs/museum.md
    PYTHONPATH=. python benchmarks/museum_table.py -o -       # prints it instead

For every piece of ``tests/museum`` (MUSEUM) it runs the default check, ``check(factory)``
with the ci profile (and the piece's own ``check()`` arguments: ``world_size=2`` for the
multi-rank pieces), and the torchdata test pattern of ``tests/museum/baseline.py``, and
tabulates what each found.

"Found at example n" is counted here, not read from ``ClauseResult.found_after``: that
field is also set by Hypothesis' internal overrun (``StopTest``), which the engine's
``except BaseException`` takes for a failure, so it can name an example that passed.
The script counts the examples Hypothesis ran to a verdict (passed or failed, from
Hypothesis' observability callbacks) up to the first failure, per clause; the
multi-rank clause SC30 runs its search in the rank processes, where this cannot look.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# Observability without line coverage: with it, every example runs under a tracer and a
# check takes five times as long. Read when Hypothesis is imported, so set first.
os.environ["HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER"] = "1"

# The imports below need tests/ on sys.path and the variable above set (hence E402).
import museum  # noqa: E402
from hypothesis.internal.observability import (  # noqa: E402
    add_observability_callback,
    remove_observability_callback,
)
from museum.baseline import BASELINE_KS, baseline_configs, run_baseline  # noqa: E402

from stateful_contract import CLAUSES, Progress, check  # noqa: E402
from stateful_contract.profiles import PROFILES  # noqa: E402

#: Clauses in the order the table lists them.
ORDER = [c.id for c in CLAUSES]
#: In-process examples per clause of the ci profile (docs/clauses.md, docs/performance.md):
#: a search that first fails after this many examples failed in the worker phase.
CI_IN_PROCESS_EXAMPLES = PROFILES["ci"].examples
CI_WORKER_EXAMPLES = PROFILES["ci"].worker_examples


@dataclasses.dataclass
class Measured:
    piece: museum.Piece
    #: failed clause -> example at which its search first failed (None: not countable here)
    failed: dict[str, int | None]
    #: failed clause -> ClauseResult.found_after as check() reports it
    reported: dict[str, int | None]
    seconds: float
    baseline: Any
    baseline_seconds: float

    @property
    def caught_by_should(self) -> bool:
        return self.piece.should_catch in self.failed


def measure(piece: museum.Piece) -> Measured:
    current: list[str | None] = [None]
    verdicts: dict[str, list[str]] = defaultdict(list)

    def on_progress(p: Progress) -> None:
        current[0] = p.clause_id

    def on_observation(observation: Any) -> None:
        if getattr(observation, "type", None) == "test_case" and current[0] is not None:
            verdicts[current[0]].append(observation.status)

    started = time.perf_counter()
    add_observability_callback(on_observation)
    try:
        report = check(piece.check_target, progress=on_progress, **piece.check_kwargs)
    finally:
        remove_observability_callback(on_observation)
    seconds = time.perf_counter() - started
    failed: dict[str, int | None] = {}
    reported: dict[str, int | None] = {}
    for result in report.results:
        if result.status != "failed":
            continue
        ran = [v for v in verdicts.get(result.id, []) if v != "gave_up"]
        failed[result.id] = ran.index("failed") + 1 if "failed" in ran else None
        reported[result.id] = result.found_after
    started = time.perf_counter()
    baseline = run_baseline(piece.factory, baseline_configs(piece.baseline_world_size))
    return Measured(piece, failed, reported, seconds, baseline, time.perf_counter() - started)


def _clause_cell(cid: str, at: int | None, should: str) -> str:
    name = f"**{cid}**" if cid == should else cid
    return f"{name} ({at})" if at is not None else name


def caught_cell(m: Measured) -> str:
    if not m.failed:
        return "not caught yet"
    should = m.piece.should_catch
    cells = [_clause_cell(c, m.failed[c], should) for c in ORDER if c in m.failed]
    if should in m.failed:
        first = cells.pop([c for c in ORDER if c in m.failed].index(should))
        return first + (f"; also {', '.join(cells)}" if cells else "")
    return ", ".join(cells)


def md(text: str) -> str:
    """A docstring's reST literals as Markdown code, and a capital first letter."""
    text = text.replace("``", "`")
    return text[:1].upper() + text[1:]


def _escape(text: str) -> str:
    """A report title as Markdown text: its brackets are not links (mkdocs would resolve them)."""
    return text.replace("[", "\\[").replace("]", "\\]")


def link(report: str) -> str:
    repo, _, number = report.partition("#")
    return f"[{report}](https://github.com/{repo}/issues/{number})"


def short_clause(cid: str) -> str:
    implemented = {c.id for c in CLAUSES}
    return cid if cid in implemented else f"{cid}*"


def render(measured: list[Measured], total: float) -> str:
    implemented = {c.id for c in CLAUSES}
    caught = [m for m in measured if m.caught_by_should]
    other_only = [m for m in measured if m.failed and not m.caught_by_should]
    missed = [m for m in measured if not m.failed]
    needs = Counter(m.piece.should_catch for m in measured if m.piece.should_catch not in implemented)
    exist_missed = [m for m in measured if m.piece.should_catch in implemented and not m.caught_by_should]
    baseline = [m for m in measured if m.baseline.caught]
    lines = [
        "# The bug museum",
        "",
        f"Generated by `nox -s museum` (or `PYTHONPATH=. python benchmarks/museum_table.py`) on {time.strftime('%Y-%m-%d')} "
        f"({total:.0f} s on this machine). Every row is a resume or checkpoint bug that someone reported in "
        "a public tracker, rebuilt as a small loader in `tests/museum/` from the report's mechanism (no code "
        "is copied from the report or its project), with the report cited in its docstring.",
        "",
        "- **caught today**: the clauses `check(factory)` fails, the default ci profile "
        f"({CI_IN_PROCESS_EXAMPLES} in-process and {CI_WORKER_EXAMPLES} worker examples per clause, derandomized), with the piece's own `check()` arguments (`world_size=2` "
        "for the multi-rank pieces); in brackets the example at which that clause's search first failed "
        "(the examples Hypothesis ran to a verdict, counted by this script: see its docstring). The clause "
        "that should catch it is in bold. SC30 has no count: its search runs in the rank processes.",
        "- **should catch**: the clause of CONTRACT.md version 2 that states the behaviour the bug breaks; "
        "`*` marks clauses the spec has and the package does not implement yet.",
        f"- **torchdata pattern**: torchdata's own hand-written test (take `k` in {set(BASELINE_KS)} batches, "
        "`state_dict()`, a fresh loader, `load_state_dict`, the rest of the same epoch, compared with the "
        "uninterrupted rest), `tests/museum/baseline.py`, on 24 samples in batches of 2, shuffled or not, "
        "0 or 2 workers (and both ranks of 2 for the multi-rank pieces).",
        "",
        "## Summary",
        "",
        f"- {len(measured)} pieces from {len({m.piece.report.split('#')[0] for m in measured})} projects.",
        f"- **{len(caught)} caught today by the clause that should catch them**"
        + (f", {len(other_only)} only by another clause" if other_only else "")
        + f", {len(missed)} not caught at all.",
        "- Waiting for a clause of v2 that is not implemented: "
        + ", ".join(f"{cid} {n}" for cid, n in sorted(needs.items())) + f" ({sum(needs.values())} pieces).",
        f"- Clause exists, ci profile misses it: {len(exist_missed)} "
        f"({', '.join(m.piece.id for m in exist_missed) or 'none'}).",
        f"- The torchdata pattern catches {len(baseline)} of {len(measured)}; of those the contract misses "
        f"{sum(1 for m in baseline if not m.failed)}.",
        "",
        "| piece | report | mechanism | caught today (ci) | should catch | torchdata pattern |",
        "|---|---|---|---|---|---|",
    ]
    for m in measured:
        p = m.piece
        lines.append(f"| {p.id} | {link(p.report)} | {md(p.mechanism)} | {caught_cell(m)} | "
                     f"{short_clause(p.should_catch)} | {'caught' if m.baseline.caught else 'missed'} |")
    in_process = CI_IN_PROCESS_EXAMPLES
    worker_only = [m for m in measured if m.failed.get(m.piece.should_catch) and
                   m.failed[m.piece.should_catch] > in_process]
    misreported = [m for m in measured if _reported_note(m)]
    lines += ["", "## What the measurements say", "",
              f"- Found only by the worker examples (after the {in_process} in-process ones): "
              + (", ".join(m.piece.id for m in worker_only) or "none")
              + f". With {CI_WORKER_EXAMPLES} worker examples per clause, a bug that needs two workers *and* a particular "
              "checkpoint is found by luck: "
              + (", ".join(m.piece.id for m in measured if m.piece.id in museum.CI_MISSES
                           and m.piece.should_catch != "SC30") or "none") + " are not.",
              "- Caught by the torchdata pattern and missed by the contract: "
              + (", ".join(m.piece.id for m in baseline if not m.failed) or "none") + ".",
              "- `ClauseResult.found_after` differs from the count here for "
              + (", ".join(m.piece.id for m in misreported) or "no piece")
              + ": the engine also records Hypothesis' internal overruns as the first failure.",
              ]
    lines += ["", "## The pieces", "",
              "Each entry: the report's title, the usage that triggers the bug, where the loader is, and "
              "what the measurements saw. The tests are in `tests/museum/test_museum.py`: pieces caught today "
              "must fail their clause; the others are strict expected failures, and a hand-written version "
              "of their usage pattern (`tests/museum/triggers.py`) shows each one's bug.", ""]
    for m in measured:
        p = m.piece
        where = f"`{p.factory.__module__.replace('museum.', 'tests/museum/')}.py`: `{p.factory.__qualname__}`"
        lines += [f"### {p.id}", "",
                  f"{link(p.report)}, \"{_escape(p.title)}\"", "",
                  f"- **Mechanism.** {md(p.mechanism)}",
                  f"- **Trigger.** {md(p.trigger)}",
                  f"- **Loader.** {where}"
                  + (f", `check(..., {', '.join(f'{k}={v!r}' for k, v in p.check_kwargs.items())})`"
                     if p.check_kwargs else ""),
                  f"- **Today.** {caught_cell(m)} ({m.seconds:.1f} s)."
                  + _reported_note(m)
                  + (f" Why the ci profile misses it: {museum.CI_MISSES[p.id]}." if p.id in museum.CI_MISSES else ""),
                  "- **torchdata pattern.** " + (f"caught: `{m.baseline.where[:220]}`" if m.baseline.caught
                                                   else "missed on every configuration and k."),
                  ""]
    return "\n".join(lines).rstrip() + "\n"


def _reported_note(m: Measured) -> str:
    differ = {c: r for c, r in m.reported.items() if r is not None and m.failed.get(c) not in (None, r)}
    if not differ:
        return ""
    return " `found_after` as check() reports it: " + ", ".join(f"{c} {r}" for c, r in differ.items()) + "."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", default=str(ROOT / "docs" / "museum.md"),
                        help="file to write, or - for stdout (default: docs/museum.md)")
    parser.add_argument("pieces", nargs="*", help="only these piece ids (for a quick look; the file then has only them)")
    args = parser.parse_args(argv)
    pieces = [museum.BY_ID[i] for i in args.pieces] if args.pieces else museum.MUSEUM
    started = time.perf_counter()
    measured = []
    for piece in pieces:
        m = measure(piece)
        measured.append(m)
        print(f"{piece.id}: {caught_cell(m)}; torchdata pattern {'caught' if m.baseline.caught else 'missed'} "
              f"({m.seconds + m.baseline_seconds:.1f} s)", file=sys.stderr)
    text = render(measured, time.perf_counter() - started)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
