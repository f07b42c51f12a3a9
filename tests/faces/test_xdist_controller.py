"""Under pytest-xdist the controller only merges, writes and summarises the workers' reports: it must do so
without importing torch, which the workers already paid for. Measured (docs/performance.md, "pytest -n 2 on
the quickstart's class"): the controller importing torch for its terminal summary, then tearing it down, was
most of what ``-n 2`` cost after the check at a load of 28."""

from __future__ import annotations

import sys
from pathlib import Path

from charged import run as run_charged

from stateful_contract import CLAUSES, ClauseResult, Report
from stateful_contract.report.results import Outcome
from stateful_contract.repro.impact import Impact


def worker_report() -> Report:
    """What a worker sends: a failure with its impact, coverage with workers (the checkpoint space line)."""
    counts = {"mid-window": 3, "point:w0/e0/mid-window/h0": 2, "point:w2/e1/window-boundary/h0": 1}
    outcomes = {"SC10": Outcome("failed", heading="SC10 resume-continues-the-stream", detail="1 sample lost",
                                coverage=counts, impact=Impact("silent", "1 sample lost in epoch 0", counts={"lost": 1}))}
    results = [ClauseResult.of(c, outcomes.get(c.id, Outcome("passed", coverage=counts))) for c in CLAUSES]
    return Report(target="test_x.py::TestX", results=results, num_workers=[0, 2])


def test_the_controller_merges_writes_and_summarises_without_torch(tmp_path: Path) -> None:
    saved = tmp_path / "sent.json"
    worker_report().to_json(saved)
    code = f"""
import sys
from stateful_contract.faces import pytest_plugin, xdist as _xdist
from stateful_contract.report import Report
from stateful_contract.report.render import coverage_line, plural, ran, story
merged = {{}}
_xdist.merge_report(merged, "test_x.py::TestX", Report.from_json({str(saved)!r}))
report = merged["test_x.py::TestX"]
report.to_json({str(tmp_path / "written.json")!r})
lines = [coverage_line(report), plural(len(ran(report)), "clause")]
lines += [story(r, same) for r, same in ran(report) if r.is_failure]
print("\\n".join(lines))
print(sorted(m for m in ("torch", "torchdata", "stateful_contract.config", "stateful_contract.clauses")
             if m in sys.modules))
"""
    proc = run_charged([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout.splitlines()
    assert out and out[-1] == "[]", proc.stdout + proc.stderr
    assert "checkpoint space:" in out[0] and "1 sample lost" in proc.stdout, proc.stdout
