"""``stateful-contract badge`` draws a badge from a saved report without importing torch or the engine (it
once took 2.2 s of imports to read a JSON file)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from charged import run as run_charged

from stateful_contract import CLAUSES, ClauseResult, Report
from stateful_contract.report.results import Outcome
from stateful_contract.repro.impact import Impact

#: What must stay out of a badge's process: torch (two seconds), and the engine and the clauses, which import it.
HEAVY = ("torch", "torchdata", "stateful_contract.faces.cli", "stateful_contract.clauses", "stateful_contract.config",
         "stateful_contract.report.render")


def failing_report() -> Report:
    """A report with every part a badge may read: a failure with its impact, a declared deviation, a policy."""
    outcomes = {"SC10": Outcome("failed", heading="SC10 resume-continues-the-stream", detail="1 sample lost",
                                impact=Impact("silent", "1 sample lost in epoch 0", counts={"lost": 1})),
                "SC17": Outcome("expected-failure")}
    results = [ClauseResult.of(c, outcomes.get(c.id, Outcome("passed"))) for c in CLAUSES]
    results[[r.id for r in results].index("SC17")].expected_failure_reason = "holds a file handle"
    return Report(target="pkg.loaders:factory", results=results, checkpoint_alignment="epoch")


def test_the_badge_command_imports_neither_torch_nor_the_engine(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    failing_report().to_json(report)
    svg, endpoint = tmp_path / "badge.svg", tmp_path / "badge.json"
    code = ("import runpy, sys\n"
            f"sys.argv = ['stateful-contract', 'badge', {str(report)!r}, '--svg', {str(svg)!r}, '--endpoint', "
            f"{str(endpoint)!r}]\n"
            "try:\n    runpy.run_module('stateful_contract', run_name='__main__')\n"
            "except SystemExit as e:\n    print('exit', e.code)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = run_charged([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.splitlines()[-2:] == ["exit 0", "[]"], proc.stdout + proc.stderr
    # It drew the badge the report asks for, not a default one.
    assert json.loads(endpoint.read_text(encoding="utf-8"))["message"] == "failing SC10: silent data loss"
    assert "failing SC10: silent data loss" in svg.read_text(encoding="utf-8")


def test_the_badge_command_still_reports_an_unreadable_report(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    proc = run_charged([sys.executable, "-m", "stateful_contract", "badge", str(tmp_path / "bad.json")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "cannot read report" in proc.stderr, proc.stderr


def test_the_badge_command_is_listed_with_the_others() -> None:
    """The light path answers ``badge``; the full command line still lists it (and its help is the same)."""
    proc = run_charged([sys.executable, "-m", "stateful_contract", "badge", "--help"], capture_output=True,
                       text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "--endpoint" in proc.stdout and "stateful-contract badge" in proc.stdout
    listed = run_charged([sys.executable, "-m", "stateful_contract", "--help"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert "badge" in listed.stdout
