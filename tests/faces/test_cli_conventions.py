"""What a user of the command line trips on: a run that judged nothing is no pass, ``--json -``, ``-q``,
clause names, wall time, plurals, a light ``--version``, replaying a pytest report without ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest
from charged import run as run_charged

from stateful_contract import Report
from stateful_contract.faces.cli import EXIT_NOT_JUDGED, main
from stateful_contract.faces.export import junit_xml, markdown_summary

ZOO = "zoo"  # tests/ is on sys.path (conftest.py)
ROOT = Path(__file__).resolve().parents[2]

pytest_plugins = ["pytester"]


def test_a_run_that_judges_nothing_is_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SC21 on a loader without set_epoch: the one clause asked for is not judged. The run says so and why,
    exits with its own status, and its report, Markdown, JUnit XML and badge show no pass."""
    report_path, svg = tmp_path / "r.json", tmp_path / "b.svg"
    code = main(["check", f"{ZOO}:epoch_loader", "--clause", "SC21", "-q", "--json", str(report_path)])
    out = capsys.readouterr().out
    assert code == EXIT_NOT_JUDGED == 5
    assert "Verdict: PASS" not in out and "Verdict: NOT JUDGED" in out and "has no set_epoch" in out, out
    report = Report.from_json(report_path)
    assert json.loads(report_path.read_text())["verdict"] == "not-judged" and not report.passed
    assert "not judged (no clause came to a verdict" in markdown_summary(report)
    assert 'skipped="1"' in junit_xml(report) and 'failures="0"' in junit_xml(report)
    assert main(["badge", str(report_path), "--svg", str(svg)]) == 0
    assert "not judged" in svg.read_text() and "passing" not in svg.read_text()


def test_the_summary_line_counts_the_clauses_the_report_shows(capsys: pytest.CaptureFixture[str]) -> None:
    """SC21 runs after its prerequisites, which hold and are not in the report's table: the summary line beside
    "no clause came to a verdict" once said "judged 3 clauses: 2 passed, 1 not judged". It counts what the
    table shows, and names the prerequisites apart."""
    assert main(["check", f"{ZOO}:epoch_loader", "--clause", "SC21", "--profile", "dev"]) == EXIT_NOT_JUDGED
    captured = capsys.readouterr()
    assert "no clause came to a verdict" in captured.out, captured.out
    summary = captured.err.splitlines()[-1].strip()
    assert re.fullmatch(r"checked 1 clause in \d+\.\d s: 1 not judged \(after 2 prerequisites, which held\)",
                        summary), summary


def test_a_run_that_judges_nothing_is_a_skip_in_pytest_not_a_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_epoch=textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from stateful_contract.testing import StatefulLoaderContract
        from zoo import epoch_loader

        class TestNoSetEpoch(StatefulLoaderContract):
            profile = "dev"

            def make_loader(self, config):
                return epoch_loader(config)
    """))
    result = pytester.runpytest("-k", "SC21", "-rs", "--contract-report", "r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*: not-judged, 1 clause, profile dev", "*SC21 not-judged*has no set_epoch*"])
    assert json.loads((pytester.path / "r.json").read_text())["verdict"] == "not-judged"


def test_pytest_shows_a_line_per_clause_in_its_live_log_and_none_between_its_own(pytester: pytest.Pytester) -> None:
    """A class's check runs in its first test's setup: minutes of silence on two ranks. The line per clause goes
    to the log, which ``--log-cli-level INFO`` shows as it comes; without it pytest's rows stay as they are."""
    pytester.makepyfile(test_epoch=textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from stateful_contract.testing import StatefulLoaderContract
        from zoo import OffByOneResume

        class TestOffByOne(StatefulLoaderContract):
            profile = "dev"

            def make_loader(self, config):
                return OffByOneResume(config)
    """))
    live = pytester.runpytest("-k", "SC01", "--log-cli-level", "INFO", "-p", "no:cacheprovider")
    live.assert_outcomes(passed=1)
    live.stdout.re_match_lines([r"INFO +stateful_contract\.progress:.* SC01 implements-protocol +passed +\d+\.\d\d s$"])
    quiet = pytester.runpytest("-q", "-k", "SC01", "-p", "no:cacheprovider")
    quiet.assert_outcomes(passed=1)
    assert "implements-protocol" not in quiet.stdout.str() + quiet.stderr.str(), quiet.stdout.str()


def test_json_dash_writes_the_report_to_stdout_and_the_text_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{ZOO}:epoch_loader", "--clause", "SC01", "-q", "--json", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verdict"] == "pass"
    assert "Verdict: PASS" in captured.err
    assert not Path("-").exists()


def test_clauses_are_named_by_id_or_by_name(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    assert main(["check", f"{ZOO}:epoch_loader", "-q", "--profile", "dev", "--json", str(path),
                 "--clause", "resume-continues-the-stream,SC01"]) == 0
    ran = {r.id for r in Report.from_json(path).results if r.status != "skipped"}
    assert ran == {"SC01", "SC10"}


#: A correct loader whose factory sleeps 50 ms in every process but the checker's: in the parallel jobs, side by side.
SLOW_IN_THE_JOBS = """
import os, time

from zoo import epoch_loader

checker = os.getpid()


def factory(config):
    if os.getpid() != checker:
        time.sleep(0.05)
    return epoch_loader(config)
"""


def test_the_summary_line_is_wall_time_not_the_sum_of_clause_times(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Clauses judged side by side overlap: two parallel jobs whose clauses each sleep for seconds (2.2 s more
    than the run's wall time at load 13), and the summary gives the run's wall time, never the clause times
    the report gives added up."""
    (tmp_path / "slow.py").write_text(SLOW_IN_THE_JOBS)
    started = time.monotonic()
    assert main(["check", f"{tmp_path / 'slow.py'}:factory", "--clause", "SC12,SC13", "--profile", "dev",
                 "--in-process", "--jobs", "2", "--json", str(tmp_path / "r.json")]) == 0
    wall = time.monotonic() - started
    added_up = sum(r.seconds for r in Report.from_json(tmp_path / "r.json").results)
    summary = re.search(r"checked \d+ clauses? in (\d+\.\d) s", capsys.readouterr().err)
    assert summary is not None
    assert float(summary.group(1)) <= wall + 0.05 < added_up, (summary.group(0), wall, added_up)


def test_counts_take_the_singular(capfd: pytest.CaptureFixture[str]) -> None:
    # In this process: the words are the test, not the process (a new interpreter costs 3.4 s of CPU).
    assert main(["check", f"{ZOO}:epoch_loader", "--clause", "SC01"]) == 0
    out, err = capfd.readouterr()
    assert err.splitlines()[-1].strip().startswith("checked 1 clause in "), err
    assert "1 examples" not in out and " 1 example" in out, out


def test_version_imports_neither_torch_nor_the_engine() -> None:
    """``stateful-contract --version`` answers before the engine (and torch, 2 s) is imported."""
    code = ("import runpy, sys; sys.argv = ['stateful-contract', '--version']\n"
            "try:\n    runpy.run_module('stateful_contract', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'hypothesis', 'stateful_contract.faces.cli') if m in sys.modules))")
    proc = run_charged([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == [f"stateful-contract {__import__('stateful_contract').__version__}", "[]"]


# A pytest run in a fresh process, then the replay in another: 8 s of CPU and 22 s of wall at load 3, which the
# README's suite (7 minutes on 2 cores) leaves to `nox -s acceptance`; the replay of a CLI report,
# test_export_and_replay.py's, stays in the suite.
@pytest.mark.acceptance
def test_replay_of_a_pytest_report_finds_the_pytest_roots_pythonpath(tmp_path: Path) -> None:
    """The class imports a package only pytest's ``pythonpath`` makes importable (a src layout): the replay
    imports it the same way, without ``PYTHONPATH=.``."""
    (tmp_path / "src" / "mypkg").mkdir(parents=True)
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from zoo import OffByOneResume as Loader
    """))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mine.py").write_text(textwrap.dedent("""
        from mypkg import Loader
        from stateful_contract.testing import StatefulLoaderContract

        class TestMine(StatefulLoaderContract):
            profile = "dev"

            def make_loader(self, config):
                return Loader(config)
    """))
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\npythonpath = ["src"]\n')
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pytest_run = run_charged([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "SC10",
                              "--contract-report", "r.json", "-W", "ignore"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
    assert pytest_run.returncode == 1, pytest_run.stdout
    replayed = run_charged([sys.executable, "-m", "stateful_contract", "replay", "r.json", "SC10"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
    assert replayed.returncode == 1, replayed.stderr
    assert "SC10 fails again" in replayed.stdout
