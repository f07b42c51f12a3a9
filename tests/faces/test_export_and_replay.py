"""``check --junit/--markdown/--seed`` and ``replay``: a report other CI systems read, a failure rerun in seconds."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
import zoo
from charged import run as run_charged

from stateful_contract import ConfigSpace, LoaderConfig, Report, check
from stateful_contract.faces.cli import main
from stateful_contract.faces.export import junit_xml, markdown_summary
from stateful_contract.faces.replay import ReplayError, parse_example, parse_value, replay, target_of
from stateful_contract.report.results import same_causes
from stateful_contract.repro.steps import Position
from stateful_contract.search.plans import Checkpoint, Hops

IN_PROCESS = ConfigSpace(num_workers=(0,))
TESTS = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def failing() -> Report:
    """A report with passed, failed, expected-failure and not-judged clauses."""
    return check(zoo.OffByOneResume, clauses=["SC01", "SC10", "SC11", "SC12", "SC13"], space=IN_PROCESS,
                 expected_failures={"SC13": "known"}, profile="ci")


# --- JUnit XML and Markdown -----------------------------------------------------------------


def test_the_junit_xml_parses_with_one_testcase_per_clause_that_ran(failing: Report) -> None:
    root = ET.fromstring(junit_xml(failing))
    suite = root.find("testsuite")
    assert suite is not None
    cases = {c.get("name", "").split()[0]: c for c in suite.findall("testcase")}
    ran = [r.id for r in failing.results if r.status != "skipped"]
    assert list(cases) == ran  # SC18, run as a prerequisite but not selected, is left out like a deselected test
    assert suite.get("tests") == str(len(ran)) and suite.get("failures") == "2"
    for cid in ("SC10", "SC11"):
        failure = cases[cid].find("failure")
        assert failure is not None and failure.get("type") == "failed"
        assert "Reproduce:" in (failure.text or "") and "OffByOneResume" in (failure.text or "")
    xfail = cases["SC13"].find("skipped")
    assert xfail is not None and xfail.get("type") == "xfail" and "known" in xfail.get("message", "")
    assert cases["SC01"].find("failure") is None and cases["SC01"].find("skipped") is None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["seed"] == "derandomized" and properties["coverage"].startswith("checkpoints ")


def test_the_markdown_renders_a_table_with_one_row_per_clause_that_ran(failing: Report) -> None:
    markdown = pytest.importorskip("markdown")
    html = markdown.markdown(markdown_summary(failing), extensions=["tables", "fenced_code"])
    assert html.count("<table>") == 1
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = body.count("<tr>")
    assert rows == len([r for r in failing.results if r.status != "skipped"])
    assert "SC10 resume-continues-the-stream" in body and "FAILED" in body
    # Each failure follows with its reproduction as a code block, once per cause: SC11 fails on
    # SC10's minimal example with SC10's difference, and says so in a line.
    same = {cid: first for cid, first in same_causes(failing.results).items() if failing[cid].is_failure}
    assert html.count('<code class="language-python">') == 2 - len(same)
    assert all(f"{cid} {failing[cid].name}: same cause as {first}" in html for cid, first in same.items())
    assert "from zoo import OffByOneResume" in html


def test_a_pipe_or_fence_in_a_message_cannot_break_the_markdown(failing: Report) -> None:
    markdown = pytest.importorskip("markdown")
    sc10 = failing["SC10"]
    odd = Report(failing.target, [replace(sc10, got="a | b", detail="\n```\n| x |")])
    html = markdown.markdown(markdown_summary(odd), extensions=["tables", "fenced_code"])
    assert html.split("<tbody>", 1)[1].count("<tr>") == 1 and "a | b" in html


def test_check_writes_junit_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "zoo:OffByOneResume", "--clause", "SC10", "--quiet", "--profile", "dev", "--seed", "5",
                 "--json", str(tmp_path / "r.json"), "--junit", str(tmp_path / "out/r.xml"),
                 "--markdown", str(tmp_path / "out/r.md")])
    assert code == 1
    out = capsys.readouterr().out
    assert "coverage: checkpoints " in out and "(seed 5)" in out
    assert ET.parse(tmp_path / "out/r.xml").getroot().tag == "testsuites"
    assert (tmp_path / "out/r.md").read_text().startswith("### StatefulLoader contract v2.3: `zoo:OffByOneResume`")
    assert Report.from_json(tmp_path / "r.json").seed == 5


# --- parsing a recorded example ----------------------------------------------------------


def test_a_recorded_config_and_plan_read_back_as_the_dataclasses(failing: Report) -> None:
    config, plan = parse_example(failing["SC10"])
    assert isinstance(config, LoaderConfig) and config.as_code() == failing["SC10"].config
    assert isinstance(plan, Checkpoint) and repr(plan) == failing["SC10"].plan
    config, plan = parse_example(failing["SC11"])
    assert isinstance(plan, Hops) and repr(plan) == failing["SC11"].plan


def test_the_clauses_own_plans_read_back_too() -> None:
    from stateful_contract.clauses.trainer import CutShort, Reload
    from stateful_contract.clauses.worker_change import WorkerChange
    from stateful_contract.search.epoch_plans import EpochLoop

    for plan in (Reload(Position(0, 1), Position(1, 0, after_stop=True)), CutShort(2, 1, 0),
                 WorkerChange(Position(0, 2), 1), EpochLoop(1, "after StopIteration", 0, 3)):
        assert parse_value(repr(plan)) == plan
    assert parse_value("LoaderConfig(dataset_size=3, extra=(('k', -1.5),))") == LoaderConfig(
        dataset_size=3, extra=(("k", -1.5),))


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "Position(epoch=open('x'))",
                                  "Position.__class__", "LoaderConfig(**{'seed': 1})", "lambda: 0"])
def test_parsing_builds_literals_and_known_dataclasses_only(text: str) -> None:
    with pytest.raises(ReplayError):
        parse_value(text)


def test_a_pytest_class_report_names_its_class_as_a_check_target() -> None:
    assert target_of(Report("tests/test_x.py::TestLoader", [])) == "tests/test_x.py:TestLoader"
    assert target_of(Report("pkg.mod:factory", [])) == "pkg.mod:factory"


# --- replay -------------------------------------------------------------------------------


def test_replay_runs_only_the_recorded_example(failing: Report) -> None:
    """One example, not a search: what makes a replay take seconds (timed in benchmarks/bench_replay.py)."""
    again = replay(failing, "SC10")
    assert again["SC10"].status == "failed" and again["SC10"].examples == 1
    assert again["SC10"].config == failing["SC10"].config and again["SC10"].plan == failing["SC10"].plan
    assert again["SC10"].reproduction == failing["SC10"].reproduction


def test_replay_of_a_clause_that_passed_says_there_is_nothing_to_replay(failing: Report) -> None:
    with pytest.raises(ReplayError, match="recorded no failing example"):
        replay(failing, "SC01")


def test_the_replay_command_reproduces_a_recorded_failure(failing: Report, tmp_path: Path) -> None:
    """A fresh process, as a user runs it (timed against the bare import in benchmarks/bench_replay.py)."""
    failing.to_json(tmp_path / "r.json")
    done = run_charged([sys.executable, "-m", "stateful_contract", "replay", str(tmp_path / "r.json"), "SC10"],
                       capture_output=True, text=True, cwd=TESTS, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "SC10 fails again:" in done.stdout and "Reproduce:" in done.stdout


def test_the_replay_command_exits_0_once_the_loader_is_fixed(failing: Report, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    failing.to_json(tmp_path / "r.json")
    assert main(["replay", str(tmp_path / "r.json"), "SC10", "--target", "zoo:epoch_loader"]) == 0
    assert "the failure does not reproduce" in capsys.readouterr().out
    assert main(["replay", str(tmp_path / "missing.json"), "SC10"]) == 2
