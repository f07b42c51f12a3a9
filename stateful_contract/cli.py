"""The ``stateful-contract`` command line.

    stateful-contract check package.module:factory [--profile ci] [--clause SC10] [--json report.json]
    stateful-contract demo                 # MindSpeed-MM's wrapper and the reference one, side by side
    stateful-contract badge report.json --svg badge.svg --endpoint badge.json
    stateful-contract replay report.json SC10   # only the recorded failing example of SC10, again
    stateful-contract clauses              # the catalogue

Exit status of ``check``: 0 when every clause that ran passed or failed as declared,
1 when a clause failed or an expected failure passed, 2 when the target cannot be
used at all (import error, missing attribute, factory raising or returning a non-loader).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any, TextIO

from ._render import SHOWN, render_report, render_result
from .clauses import CLAUSES, CONTRACT_VERSION, clause
from .profiles import PROFILES

__all__ = ["main"]

#: The bundled default of ``demo``: MindSpeed-MM's wrapper against the reference one.
DEMO_TARGETS = (
    ("MindSpeed-MM wrapper", "stateful_contract.reference.factories:mindspeed_wrapper"),
    ("reference wrapper", "stateful_contract.reference.factories:reference_wrapper"),
)


class _Live:
    """Shows which clause is running and how far along it is, on stderr."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""

    def __call__(self, event: Any) -> None:
        if event.status is not None:
            if self.tty:
                self.stream.write("\r\033[K")
            self.last = ""
            return
        line = f"  running {event.clause_id} {event.name}: example {event.done}/{event.total}"
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self.stream.flush()
        elif event.clause_id != self.last:
            self.stream.write(f"  running {event.clause_id} {event.name} ...\n")
            self.stream.flush()
        self.last = event.clause_id


def _expected(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        cid, sep, reason = item.partition("=")
        if not sep or not reason.strip():
            raise SystemExit(f"stateful-contract: --expect-fail takes ID=REASON, got {item!r}")
        out[clause(cid.strip()).id] = reason.strip()
    return out


def _alignment(value: str | None) -> Any:
    if value is None or value == "window":
        return value
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"stateful-contract: --checkpoint-alignment takes 'window' or a number, got {value!r}") from None


def _cmd_check(args: argparse.Namespace) -> int:
    from ._checking import FactoryError, check
    from ._target import TargetError

    try:
        expected = _expected(args.expect_fail)
        clauses = [clause(c).id for c in args.clause] or None
    except KeyError as e:
        print(f"stateful-contract: {e.args[0]}", file=sys.stderr)
        return 2
    try:
        report = check(args.target, profile=args.profile, clauses=clauses, expected_failures=expected,
                       checkpoint_alignment=_alignment(args.checkpoint_alignment), strict=args.strict,
                       timeout=args.timeout, world_size=args.world_size, seed=args.seed,
                       progress=None if args.quiet else _Live(sys.stderr))
    except (TargetError, FactoryError) as e:
        if args.verbose:
            traceback.print_exc()
        print(f"stateful-contract: {e}", file=sys.stderr)
        return 2
    render_report(report, sys.stdout)
    if args.json:
        report.to_json(args.json)
        print(f"report written to {args.json}")
    _export(report, args)
    return 0 if report.passed else 1


def _export(report: Any, args: argparse.Namespace) -> None:
    """``--junit`` and ``--markdown``: the report for other CI systems (`stateful_contract.export`)."""
    from . import export

    if args.junit:
        export.write_junit(report, args.junit)
        print(f"JUnit XML written to {args.junit}")
    if args.markdown:
        export.write_markdown(report, args.markdown)
        print(f"Markdown summary written to {args.markdown}")


def _cmd_demo(args: argparse.Namespace) -> int:
    """MindSpeed-MM's wrapper and the reference wrapper, side by side."""
    from ._checking import check

    reports = []
    for label, target in DEMO_TARGETS:
        print(f"checking the {label} ({target}) ...", file=sys.stderr)
        started = time.perf_counter()
        reports.append(check(target, profile=args.profile, progress=None if args.quiet else _Live(sys.stderr)))
        print(f"  done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    width = 45
    print(f"StatefulLoader contract v{CONTRACT_VERSION}: PrefetchGradAccDataLoader, profile {args.profile}\n")
    print(f"  {'clause':<{width}} " + " ".join(f"{label:<20}" for label, _ in DEMO_TARGETS))
    for c in CLAUSES:
        rows = [rep[c.id] for rep in reports]
        if all(r.status == "skipped" for r in rows):
            continue
        print(f"  {c.id + ' ' + c.name:<{width}} " + " ".join(f"{SHOWN[r.status]:<20}" for r in rows))
    print("  " + " " * width + " " + " ".join(f"{'PASS' if rep.passed else 'FAIL':<20}" for rep in reports))
    seed = reports[0]
    for r in seed.results:
        if r.is_failure:
            print(f"\n--- MindSpeed-MM's wrapper, {r.id} {r.name} ---\n{render_result(r)}")
    # The demo succeeds when the contract tells the two apart as it should.
    return 0 if (not reports[0].passed and reports[1].passed) else 1


def _cmd_clauses(args: argparse.Namespace) -> int:
    for c in CLAUSES:
        print(f"{c.id}  {c.name}  [{c.tier}]\n    {c.statement}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stateful-contract",
        description="Check that a dataloader checkpoints and resumes like torchdata's StatefulDataLoader.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check", help="run the contract against a loader factory")
    p.add_argument("target", help="package.module:factory or path/to/file.py:factory; "
                                  "factory(config: LoaderConfig) returns a fresh loader")
    p.add_argument("--profile", choices=list(PROFILES), default="ci",
                   help="dev: fast; ci: deterministic (default); thorough: many more examples")
    p.add_argument("--clause", action="append", default=[], metavar="ID", help="run only this clause (repeatable)")
    p.add_argument("--expect-fail", action="append", default=[], metavar="ID=REASON",
                   help="declare an expected failure (repeatable)")
    p.add_argument("--checkpoint-alignment", metavar="window|N",
                   help="declare the loader exact only at window boundaries (or every N batches)")
    p.add_argument("--strict", action="store_true", help="also run the strict tier (SC40)")
    p.add_argument("--world-size", type=int, default=1, metavar="N", help="check N ranks on torch.distributed")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per example")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON")
    p.add_argument("--junit", metavar="PATH", help="write the report as JUnit XML (one testcase per clause)")
    p.add_argument("--markdown", metavar="PATH", help="write a Markdown summary (one table row per clause)")
    p.add_argument("--seed", type=int, default=None, metavar="N",
                   help="seed the search (the report records it; dev and thorough draw one otherwise)")
    p.add_argument("--quiet", action="store_true", help="no live progress")
    p.add_argument("--verbose", action="store_true", help="tracebacks for target errors")
    p.set_defaults(func=_cmd_check)

    d = sub.add_parser("demo", help="MindSpeed-MM's broken wrapper and the reference one, side by side")
    d.add_argument("--profile", choices=list(PROFILES), default="ci")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=_cmd_demo)

    c = sub.add_parser("clauses", help="list the clauses")
    c.set_defaults(func=_cmd_clauses)

    from . import badge

    b = sub.add_parser("badge", help="turn a JSON report into an SVG badge and a shields.io endpoint")
    badge.add_arguments(b)
    b.set_defaults(func=badge.run)

    from . import replay

    r = sub.add_parser("replay", help="rerun only the recorded failing example of a clause from a JSON report")
    replay.add_arguments(r)
    r.set_defaults(func=replay.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
