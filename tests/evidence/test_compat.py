"""The compatibility matrix (tests/compat, docs/compatibility.md) is measured, strict and current.

Rows marked ``ci`` (nothing to install beyond this package's dependencies: about 5 minutes of
CPU together, measured 2026-12-07) run in the acceptance session: each declared failure must
still fail with its clause (an "unexpected-pass" fails the test, so the page stays true
when torchdata fixes a bug), and every other clause must hold. The other rows need
their packages and minutes each: they run when ``STATEFUL_CONTRACT_MATRIX=1`` is set
and their package imports, and are skipped otherwise
(``nox -s matrix`` checks the same declarations as strictly while it writes the page).
"""

from __future__ import annotations

import ast
import dataclasses
import datetime
import os
import re
import sys
from pathlib import Path

import pytest
from charged import run as run_charged

from stateful_contract import CLAUSES
from tests.compat.rows import ROWS, Row, missing
from tests.compat.table import Measured, measure, render

DOCS = Path(__file__).resolve().parents[2] / "docs"
MATRIX = os.environ.get("STATEFUL_CONTRACT_MATRIX") == "1"


def _check_strictly(row: Row) -> None:
    m = measure(row)
    assert m.report is not None, m.why_not
    report = m.report
    problems = {r.id: f"{r.status}: {r.message[:800]}\n{r.reproduction}" for r in report.results
                if r.status in ("failed", "unexpected-pass")}
    assert not problems, problems
    for clause_id in row.expected_failures:
        assert report[clause_id].status == "expected-failure", (clause_id, report[clause_id].status)
    assert report.passed
    core = [r for r in report.results if r.tier == "core"]
    assert core and all(r.status != "skipped" for r in core), "every core clause must run"


@pytest.mark.acceptance
@pytest.mark.parametrize("name", [n for n, r in ROWS.items() if r.ci])
def test_ci_row_fails_exactly_its_declared_clauses(name: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR", logger="torchdata.stateful_dataloader.stateful_dataloader")
    _check_strictly(ROWS[name])


@pytest.mark.parametrize("name", [n for n, r in ROWS.items() if not r.ci])
def test_optional_row_fails_exactly_its_declared_clauses(name: str) -> None:
    row = ROWS[name]
    if not MATRIX:
        pytest.skip("minutes per row: set STATEFUL_CONTRACT_MATRIX=1 (nox -s matrix checks them while writing the page)")
    why_not = missing(row)
    if why_not is not None:
        pytest.skip(why_not)
    _check_strictly(row)


def test_every_row_is_a_target_with_reasons_that_cite_a_finding() -> None:
    from stateful_contract.isolation.target import load_target
    from stateful_contract.links import doc

    ids = {c.id for c in CLAUSES}
    findings = (DOCS / "findings.md").read_text(encoding="utf-8")
    for name, row in ROWS.items():
        assert name == row.name and callable(load_target(row.target)), name
        for clause_id, reason in row.expected_failures.items():
            assert clause_id in ids, (name, clause_id)
            cited = re.findall(r"F(\d+)\)", reason) + re.findall(r"F(\d+)[,;]", reason)
            assert doc("findings.md") in reason and cited, (name, clause_id, reason)  # the published page
            for number in cited:
                assert f'<a id="f{number}"></a>' in findings, (name, f"F{number} is not in docs/findings.md")
    assert len({r.family for r in ROWS.values()}) >= 6


def test_the_page_lists_every_row_with_its_badge() -> None:
    page = (DOCS / "compatibility.md").read_text(encoding="utf-8")
    for name in ROWS:
        assert f"`{name}`" in page, f"docs/compatibility.md has no row {name}: run python -m tests.compat"
        assert (DOCS / "compat-badges" / f"{name}.svg").is_file(), name


def test_a_row_that_cannot_run_says_why_on_the_page() -> None:
    row = Row("absent", "nothing", "no-such-distribution", "manual:manual_skip", "a row whose module is absent",
              requires=("no_such_module_here",))
    m = measure(row)
    assert m.report is None and m.why_not == "`no_such_module_here` is not installed"
    page = render([m], command="python -m tests.compat")
    assert "## Rows that could not run here" in page and "`no_such_module_here` is not installed" in page
    assert "no-such-distribution not installed" in page and "not run" in page
    assert Measured(row).verdict() == "not run" and "<svg" in m.badge()


def test_litdata_sc23_catches_the_elastic_drop_last_loss() -> None:
    """F26 (docs/findings.md): litdata's elastic resume onto more workers, with drop_last, loses the
    end of the epoch. SC23's explicit examples find it; on the report's own example SC23 must fail, naming
    the lost samples (a clause weakened for litdata's elastic resume would pass it)."""
    from stateful_contract import LoaderConfig, check
    from stateful_contract.clauses.worker_change import WorkerChange
    from stateful_contract.repro.steps import Position

    row = ROWS["litdata"]
    why_not = missing(row)
    if why_not is not None:
        pytest.skip(why_not)
    config = LoaderConfig(dataset_size=12, batch_size=2, drop_last=True, num_workers=1, shuffle=False)
    result = check(row.target, clauses=["SC23"], target=row.target,
                   replay=(config, WorkerChange(Position(0, 1), 2)))["SC23"]
    assert result.status == "failed", result.message
    assert "lost [10, 11]" in result.message, result.message


def test_a_run_of_some_rows_keeps_the_others_as_the_page_has_them() -> None:
    """`python -m tests.compat ROW --keep-others` rewrites the page around the rows it ran: every other
    row's lines (summary, clauses, reasons, notes) come back as the page had them, and the page says
    which rows were measured on which day."""
    from tests.compat.page import kept_rows

    page = (DOCS / "compatibility.md").read_text(encoding="utf-8")
    kept = kept_rows(page)
    assert set(kept) == set(ROWS), set(ROWS) ^ set(kept)
    again = render([], command="python -m tests.compat", kept=kept, order=list(ROWS))
    body = [line for line in page.splitlines() if not line.startswith("rows' checks took")]
    assert [line for line in again.splitlines() if not line.startswith("rows' checks took")] == body
    absent = Row("absent", "nothing", "no-such-distribution", "manual:manual_skip", "a row whose module is absent",
                 requires=("no_such_module_here",))
    # Rows measured on two earlier days, and one today: each keeps its own day through the rewrite (they were
    # all restamped with the page's oldest).
    days = {name: f"2026-11-{10 + i % 2}" for i, name in enumerate(kept)}
    dated = {name: dataclasses.replace(k, measured=days[name]) for name, k in kept.items()}
    mixed = render([measure(absent)], command="python -m tests.compat", kept=dated, order=[*ROWS, "absent"])
    assert all(k.summary in mixed for k in kept.values())
    again = kept_rows(mixed)
    assert {name: k.measured for name, k in again.items()} == {**days, "absent": datetime.date.today().isoformat()}


#: The OLMo row's work directories in the processes of a check: importing the module (makes none), a process
#: started in a run directory (leaves by ``os._exit``, as the check's processes do, without exit handlers), the
#: checker's first loader, and a job the checker forks after it (``os._exit`` too).
OLMO_PROCESSES = """
import os, pathlib, tempfile
from tests.compat import olmo
from stateful_contract.isolation.processes import MARKER_ENV

made_by_import = sorted(os.listdir(tempfile.gettempdir()))
run_dir = tempfile.mkdtemp()
if (pid := os.fork()) == 0:
    os.environ[MARKER_ENV] = run_dir
    (olmo._work_dir() / "order.npy").write_bytes(b"x")
    os._exit(0)
os.waitpid(pid, 0)
(olmo._work_dir() / "order.npy").write_bytes(b"x")
if (pid := os.fork()) == 0:
    (olmo._work_dir() / "job.npy").write_bytes(b"x")
    os._exit(0)
os.waitpid(pid, 0)
print(made_by_import)
print(sorted(str(p.relative_to(run_dir)) for p in pathlib.Path(run_dir).rglob("*")))
"""


def test_the_olmo_rows_leave_no_work_dir_behind(tmp_path: Path) -> None:
    """Importing the row's module makes no directory (one made then, deleted only by an exit handler, was left
    by every killed process that imported it); each process of a check writes OLMo-core's files in a work_dir
    that the check deletes: a process it started in its run directory, the checker and the jobs it forks in
    one the checker deletes at its exit (they were left in the temporary directory, one per process, 13 MB
    each)."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(DOCS.parent)}
    proc = run_charged([sys.executable, "-c", OLMO_PROCESSES], env=env, capture_output=True, text=True,
                       timeout=300, cwd=DOCS.parent, check=False)
    assert proc.returncode == 0, proc.stderr
    made_by_import, in_run_dir = map(ast.literal_eval, proc.stdout.strip().splitlines()[-2:])
    assert made_by_import == []
    assert len(in_run_dir) == 2 and in_run_dir[0].startswith("olmo-work-") and in_run_dir[1].endswith("/order.npy")
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1, left  # the run directory, which is the check's to delete (here, the test's)
