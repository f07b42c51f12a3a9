"""The ``stateful-contract`` command line.

    stateful-contract check package.module:factory [--profile ci] [--clause SC10] [-x] [--json report.json]
    stateful-contract demo                 # MindSpeed-MM's wrapper and the reference one, side by side
    stateful-contract badge report.json --svg badge.svg --endpoint badge.json
    stateful-contract replay report.json SC10   # only the recorded failing example of SC10, again
    stateful-contract clauses              # the catalogue

Exit status of ``check``: 0 when every clause that ran passed or failed as declared, 1 when a clause failed (a
loader that crashed, hung or ran out of memory included) or an expected failure passed, 2 when the command
line is wrong or the target cannot be used at all (import error, missing attribute, factory raising, returning
a non-loader or the same loader twice), 5 when no clause came to a verdict (each one run was not judged, as
SC21 on a loader without ``set_epoch``: nothing is known to hold; 5 is pytest's status when no test ran),
130 when interrupted by Ctrl-C (143 by SIGTERM), after writing the partial report.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import sys
import textwrap
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from .._version import __version__
from ..clauses import CLAUSES, CONTRACT_VERSION
from ..isolation.target import TargetError
from ..isolation.workspace import leave
from ..report.render import SHOWN, plural, ran, render_failures, render_report, story, summary_line
from ..report.results import same_causes
from ..repro.guard import sigint_ignored
from ..run.check import CheckInterrupted, FactoryError, check
from ..run.options import CheckOptions, OptionError, UnknownClauseWarning
from ..spellings import OPTIONS, speaking
from . import badge, export, flags, replay
from .live import QUIET_HELP, shown

__all__ = ["EXIT_NOT_JUDGED", "exit_status", "main"]

#: The exit status of a check none of whose clauses came to a verdict (`Report.judged_nothing`).
EXIT_NOT_JUDGED = 5

#: The bundled default of ``demo``: MindSpeed-MM's wrapper against the reference one.
DEMO_TARGETS = (
    ("MindSpeed-MM wrapper", "stateful_contract.reference.factories:mindspeed_wrapper"),
    ("reference wrapper", "stateful_contract.reference.factories:reference_wrapper"),
)


@contextlib.contextmanager
def _stopped_by_sigterm() -> Iterator[list[int]]:
    """SIGTERM (a CI job cancelled) ends the check as Ctrl-C does: the partial report is still written."""
    got: list[int] = []

    def on_term(signum: int, frame: Any) -> None:
        got.append(signum)
        raise KeyboardInterrupt

    with contextlib.ExitStack() as restore:
        with contextlib.suppress(ValueError):  # not the main thread (main() called from a thread): leave it alone
            restore.callback(signal.signal, signal.SIGTERM, signal.signal(signal.SIGTERM, on_term))
        yield got


def _options(args: argparse.Namespace) -> CheckOptions:
    """The `CheckOptions` of ``check``'s command line; an expected failure naming no clause is a usage error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownClauseWarning)  # a typo on a command line is caught now
        return CheckOptions(**flags.options_of(args))


def run_check(args: argparse.Namespace) -> int:
    """``check``'s command (or the distributed command's, the same): the report, written, and the exit status."""
    try:
        options, example = _options(args), replay.example_of(args)
    except OptionError as e:
        return _usage(flags.said(e))
    except UnknownClauseWarning as e:
        return _usage(str(e))
    status = 0
    # The heartbeat stops on every way out of the block, a check that raises included (faces/live.py).
    with _stopped_by_sigterm() as terminated, shown(args.quiet) as live:
        try:
            report = check(args.target, options, progress=live, replay=example)
        except (TargetError, FactoryError) as e:
            live.stop()  # the usage error follows, not a heartbeat
            if args.verbose:
                traceback.print_exc()
            return _usage(str(e))
        except CheckInterrupted as e:
            report = e.report
            status = 128 + (terminated[0] if terminated else signal.SIGINT)
        live.finish(report)
    with sigint_ignored() if status else contextlib.nullcontext():  # a second Ctrl-C must not cut the report short
        write_report(report, args)
        if status:
            print(f"stateful-contract: interrupted; the report above is partial (exit {status})", file=sys.stderr)
    return status or exit_status(report)


def exit_status(report: Any) -> int:
    """0 pass, 1 fail, `EXIT_NOT_JUDGED` when no clause came to a verdict (the module's docstring)."""
    return 0 if report.passed else EXIT_NOT_JUDGED if report.verdict == "not-judged" else 1


def write_report(report: Any, args: argparse.Namespace) -> None:
    """The report on stdout, and in the files ``--json``, ``--junit`` and ``--markdown`` name. A file named
    ``-`` is standard output: the human report then goes to standard error, so the output can be piped."""
    piped = "-" in (args.json, args.junit, args.markdown)
    told = sys.stderr if piped else sys.stdout
    render_report(report, told)
    _full_reasons(report, told, args.verbose)
    for path, text, written in ((args.json, report.to_json, "report"),
                                (args.junit, functools.partial(export.junit_xml, report), "JUnit XML"),
                                (args.markdown, functools.partial(export.markdown_summary, report),
                                 "Markdown summary")):
        if path == "-":
            sys.stdout.write(text())
        elif path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text(), encoding="utf-8")
            print(f"{written} written to {path}", file=told)


def _full_reasons(report: Any, out: TextIO, verbose: bool) -> None:
    """The table cuts a long reason at "..."; a failure's is in full under it, the others' with ``-v``."""
    cut = [r for r, _ in ran(report) if not r.is_failure and summary_line(r).endswith("...")]
    if not cut:
        return
    if not verbose:
        out.write(f"\n{plural(len(cut), 'reason')} in the table {'are' if len(cut) != 1 else 'is'} "
                  "cut at '...': -v prints them in full (so does the JSON report)\n")
        return
    out.write("\nReasons in full:\n")
    for r in cut:
        text = f"declared: {r.expected_failure_reason}" if r.status == "expected-failure" else (r.got or r.message)
        out.write(f"  {r.id} {SHOWN[r.status]}: " + text.replace("\n", "\n    ") + "\n")


def _usage(message: str) -> int:
    print(f"stateful-contract: {message}", file=sys.stderr)
    return 2


def _cmd_demo(args: argparse.Namespace) -> int:
    reports = []
    for label, target in DEMO_TARGETS:
        print(f"checking the {label} ({target}) ...", file=sys.stderr)
        started = time.perf_counter()
        with shown(args.quiet) as live:
            reports.append(check(target, profile=args.profile, progress=live))
            live.finish(reports[-1])
        print(f"  done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    width = 45
    print(f"StatefulLoader contract v{CONTRACT_VERSION}: PrefetchGradAccDataLoader, profile {args.profile}\n")
    print(f"  {'clause':<{width}} " + " ".join(f"{label:<20}" for label, _ in DEMO_TARGETS)
          + "what the MindSpeed-MM wrapper's failure does to a training run")
    same = same_causes(reports[0].results)
    for c in CLAUSES:
        rows = [rep[c.id] for rep in reports]
        if all(r.status == "skipped" for r in rows):
            continue
        told = story(rows[0], same.get(c.id)) if rows[0].is_failure or c.id in same else ""
        print((f"  {c.id + ' ' + c.name:<{width}} " + " ".join(f"{SHOWN[r.status]:<20}" for r in rows)
               + told).rstrip())
    print("  " + " " * width + " " + " ".join(f"{'PASS' if rep.passed else 'FAIL':<20}" for rep in reports))
    render_failures(reports[0], sys.stdout, label="MindSpeed-MM's wrapper, ")
    # The demo succeeds when the contract tells the two apart as it should.
    return 0 if (not reports[0].passed and reports[1].passed) else 1


def _cmd_clauses(args: argparse.Namespace) -> int:
    for c in CLAUSES:
        print(f"{c.id}  {c.name}  [{c.tier}]\n    {c.statement}")
    return 0


class _WrappedAtSpaces:
    """Help wrapped at spaces only: argparse also breaks at hyphens, and ``--help`` then printed a value to
    type, ``iter-then-next``, as ``iter-then-`` and ``next`` on two lines."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class HelpFormatter(_WrappedAtSpaces, argparse.HelpFormatter):
    pass


class RawDescriptionHelpFormatter(_WrappedAtSpaces, argparse.RawDescriptionHelpFormatter):
    pass


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit 2), like every other usage error here, and help wrapped
    at spaces only (`HelpFormatter`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def add_check_arguments(p: argparse.ArgumentParser, **defaults: Any) -> None:
    """``check``'s arguments, on ``p`` (with this command's ``defaults``, as `flags.add_options` takes them)."""
    p.add_argument("target", help="package.module:factory or path/to/file.py:factory; "
                                  "factory(config: LoaderConfig) returns a fresh loader")
    flags.add_options(p, list(OPTIONS), **defaults)  # flags and help from the one table, `spellings.OPTIONS`
    replay.add_example_arguments(p)
    add_output_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    p.set_defaults(func=run_check)


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """Where the report goes (`write_report`), for every command that writes one."""
    p.add_argument("--json", metavar="PATH", help="write the report as JSON ('-': standard output, the text "
                                                  "report then goes to standard error)")
    p.add_argument("--junit", metavar="PATH", help="write the report as JUnit XML (one testcase per clause; '-': "
                                                   "standard output)")
    p.add_argument("--markdown", metavar="PATH", help="write a Markdown summary (one table row per clause; '-': "
                                                      "standard output)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="the table's reasons in full (where it cuts them at '...'), and tracebacks for target errors")


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="stateful-contract", description="Check that a dataloader checkpoints and resumes "
                                                           "like torchdata's StatefulDataLoader.")
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    add_check_arguments(sub.add_parser("check", help="run the contract against a loader factory"))

    d = sub.add_parser("demo", help="MindSpeed-MM's broken wrapper and the reference one, side by side")
    flags.add_options(d, ["profile"])
    d.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    d.set_defaults(func=_cmd_demo)

    sub.add_parser("clauses", help="list the clauses").set_defaults(func=_cmd_clauses)
    for face, says in ((badge, "turn a JSON report into an SVG badge and a shields.io endpoint"),
                       (replay, "rerun only the recorded failing example of a clause from a JSON report")):
        command = sub.add_parser(face.__name__.rpartition(".")[2], help=says)
        face.add_arguments(command)
        command.set_defaults(func=face.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with speaking("cli"):  # every hint names the command line's options
        return int(args.func(args))


def entry() -> NoReturn:
    """The ``stateful-contract`` command (and ``python -m stateful_contract``). Interrupted, it leaves once
    the partial report is written: tearing down an interpreter that imported torch takes most of a second."""
    code = main()
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        leave(end_children=True)  # os._exit runs no finalizer: the check's files, and an in-process loader's workers
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
