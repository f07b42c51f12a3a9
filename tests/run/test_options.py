"""One options object for every face, every core by default, the first failure first."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest
import zoo

from stateful_contract import CheckOptions, ConfigSpace, OptionError, UnknownClauseWarning, check
from stateful_contract.clauses import CLAUSES, run_order
from stateful_contract.faces.cli import main
from stateful_contract.faces.pytest_plugin import run_options
from stateful_contract.faces.testing import StatefulLoaderContract, class_options
from stateful_contract.run.options import XDIST_WORKER_ENV, CheckKeywords, ExpectedFailures, default_jobs

IN_PROCESS = ConfigSpace(num_workers=(0,))
pytest_plugins = ["pytester"]
MUSEUM = Path(__file__).resolve().parents[2] / "docs" / "museum.md"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def test_every_face_builds_the_same_options(cli_options: Any) -> None:
    """The command line, the pytest mixin and check()'s keywords: one object, field for field."""
    from_cli = cli_options(
        "zoo:epoch_loader", "--profile", "dev", "--strict", "--expect-fail", "SC17=holds a file",
        "--checkpoint-alignment", "window", "--timeout", "5", "--jobs", "2", "--seed", "7", "-x",
        "--memory-limit", "1G", "--in-process")

    class TestLoader(StatefulLoaderContract):
        profile = "dev"
        strict = True
        expected_failures: ClassVar[ExpectedFailures] = {"SC17": "holds a file"}
        checkpoint_alignment = "window"
        timeout = 5.0
        jobs = 2
        exitfirst = True
        memory_limit = 1 << 30
        isolation = "in-process"

    keywords: CheckKeywords = {"profile": "dev", "strict": True, "expected_failures": {"sc17": "holds a file"},
                               "checkpoint_alignment": "window", "timeout": 5.0, "jobs": 2, "exitfirst": True,
                               "memory_limit": 1 << 30, "isolation": "in-process"}
    from_python = CheckOptions(**keywords)
    from_pytest = class_options(TestLoader).replace(seed=7)
    assert from_cli == from_python.replace(seed=7) == from_pytest
    assert from_cli.expected_failures == {"SC17": "holds a file"} and from_cli.exitfirst
    # Every field of CheckOptions is a keyword of check() (the typed form says the same).
    assert set(CheckKeywords.__annotations__) == {f.name for f in dataclasses.fields(CheckOptions)} - {
        "unknown_expected"}


class _Config:
    """What run_options reads of a pytest config: the plugin's options and pytest's -x."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    def getini(self, name: str) -> Any:
        raise ValueError(name)


def test_the_plugin_maps_the_run_choices_and_pytest_x_onto_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATEFUL_CONTRACT_PROFILE", raising=False)
    assert run_options(_Config()) == {}
    chosen = run_options(_Config(stateful_contract_profile="dev", stateful_contract_seed=3, maxfail=1))
    assert chosen == {"profile": "dev", "seed": 3, "exitfirst": True}
    assert CheckOptions().replace(**chosen) == CheckOptions(profile="dev", seed=3, exitfirst=True)
    assert "exitfirst" not in run_options(_Config(maxfail=2))


def test_wrong_values_raise_one_error_naming_the_option() -> None:
    for field, value, says in [("jobs", 0, "takes a number >= 1, got 0"), ("world_size", 0, "takes a number >= 1"),
                               ("timeout", -1.0, "takes seconds >= 0"), ("profile", "fastest", "takes one of dev"),
                               ("checkpoint_alignment", "windows", "takes 'epoch' (checkpoints only at epoch ends), 'window'"),
                               ("clauses", ["SC99"], "unknown clause 'SC99'"), ("isolation", "vm", "takes one of")]:
        with pytest.raises(OptionError, match=re.escape(says)) as raised:
            CheckOptions(**{field: value})
        assert raised.value.option == field
    assert CheckOptions(clauses="sc10, SC13").clauses == ("SC10", "SC13")


def test_a_named_clause_the_world_cannot_run_is_a_usage_error_not_the_loaders_failure() -> None:
    """SC30 named on one process once crashed in its scenario and read as a FAIL of the loader
    ("not reproducible: one example, two results"); it is the option that is wrong."""
    for cid in ("SC30", "SC31"):
        with pytest.raises(OptionError, match=rf"names {cid}, a clause of the distributed tier, which needs at "
                                              r"least 2 ranks \(multi-rank: run with check\(\.\.\., world_size=2\)\)"):
            CheckOptions(clauses=[cid])
    assert CheckOptions(clauses=["SC30"], world_size=2).selected == ["SC30"]


def test_an_unknown_expected_failure_is_warned_about_exactly_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = CheckOptions(expected_failures={"SC99": "typo", "SC17": "known"})
        again = options.replace(seed=1).replace(clauses=["SC01"])
        report = check(zoo.epoch_loader, again, space=IN_PROCESS)
    unknown = [w for w in caught if issubclass(w.category, UnknownClauseWarning)]
    assert len(unknown) == 1, [str(w.message) for w in unknown]
    assert "expected_failures names 'SC99', which is no clause of the contract" in str(unknown[0].message)
    assert again.expected_failures == {"SC17": "known"} and again.unknown_expected == ("SC99",)
    assert [n for n in report.notes if "SC99" in n] == ["expected failure 'SC99' names no clause"]


def test_an_unknown_expected_failure_on_a_pytest_class_is_warned_about_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=(
        "from stateful_contract.reference import factories\n"
        "from stateful_contract.testing import StatefulLoaderContract\n\n"
        "class TestLoader(StatefulLoaderContract):\n"
        "    profile = 'dev'\n"
        "    expected_failures = {'SC99': 'typo'}\n"
        "    def make_loader(self, config):\n"
        "        return factories.stateful_dataloader(config)\n"))
    result = pytester.runpytest("-k", "SC01", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    assert str(result.stdout).count("TestLoader.expected_failures names 'SC99', which is no clause") == 1


def test_jobs_default_to_every_core_and_to_one_under_xdist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(XDIST_WORKER_ENV, raising=False)
    assert default_jobs() == _cores() and CheckOptions().jobs == _cores()
    assert CheckOptions(profile="ci").jobs == CheckOptions(profile="thorough").jobs == _cores()
    monkeypatch.setenv(XDIST_WORKER_ENV, "gw0")
    assert default_jobs() == 1 and CheckOptions().jobs == 1
    assert CheckOptions(jobs=3).jobs == 3  # a choice is kept


def test_the_run_order_puts_the_likeliest_failure_first_after_what_it_needs() -> None:
    order = run_order([c.id for c in CLAUSES])
    position = {c.id: i for i, c in enumerate(order)}
    for c in order:
        assert all(position[n] < position[c.id] for n in c.needs if n in position), c.id
    resumes = [c for c in order if c.needs == ("SC01", "load", "SC18")]
    assert [c.priority for c in resumes] == sorted((c.priority for c in resumes), reverse=True)
    assert order[0].id == "SC01"


def test_the_kill_counts_are_the_museum_tables() -> None:
    """`kills` on each clause is derived from docs/museum.md's "caught today" column, not kept by hand."""
    counts: dict[str, int] = {}
    for line in MUSEUM.read_text(encoding="utf-8").splitlines():
        cells = line.split("|")
        if len(cells) < 7 or not line.startswith("| ") or cells[1].strip() in ("piece", "---"):
            continue
        for cid in set(re.findall(r"SC\d\d", cells[4])):
            counts[cid] = counts.get(cid, 0) + 1
    assert counts, "docs/museum.md has no table rows"
    wrong = {c.id: (c.kills, counts.get(c.id, 0)) for c in CLAUSES if c.kills != counts.get(c.id, 0)}
    assert not wrong, f"set kills= on these clauses to the museum's count (clause: (kills, museum)): {wrong}"


def test_exitfirst_stops_at_the_first_failure_and_reports_the_rest_as_not_run() -> None:
    report = check(zoo.KeywordOnlyLoad, space=IN_PROCESS, profile="dev", seed=1, exitfirst=True, jobs=1)
    assert report.stopped_at == "SC02" and report["SC02"].status == "failed"
    assert report["SC01"].status == "passed"
    not_run = [r for r in report.results if r.status == "not-judged"]
    assert {r.id for r in not_run} == {c.id for c in CLAUSES if c.tier in ("structure", "core", "trainer")} - {
        "SC01", "SC02"}
    assert all(r.message.startswith("not run: the check stopped at the first failure, SC02") for r in not_run)
    assert any("stopped at the first failure, SC02" in n and "not run" in n for n in report.notes)
    assert report["SC02"].reproduction  # the failure is told in full
    assert _round_trip(report)["stopped_at"] == "SC02"


def _round_trip(report: Any) -> dict[str, Any]:
    from stateful_contract import Report

    data: dict[str, Any] = json.loads(report.to_json())
    assert Report.from_dict(data).stopped_at == report.stopped_at
    return data


def test_exitfirst_in_parallel_jobs_stops_handing_out_clauses() -> None:
    clauses = ["SC10", "SC11", "SC13", "SC14", "SC15", "SC16"]
    report = check(zoo.OffByOneResume, clauses=clauses, space=IN_PROCESS, profile="dev", seed=5, exitfirst=True,
                   jobs=2)
    assert report.stopped_at in ("SC10", "SC13", "SC11") and report[report.stopped_at].status == "failed"
    # The likeliest failures go first (SC13, SC10); SC14-SC16 (no museum kill) are never reached.
    for cid in ("SC14", "SC15", "SC16"):
        assert report[cid].status == "not-judged" and report[cid].message.startswith("not run"), cid
    assert not report.passed


def test_without_a_failure_exitfirst_changes_nothing() -> None:
    kwargs: CheckKeywords = {"clauses": ["SC10", "SC14"], "space": IN_PROCESS, "profile": "dev", "seed": 2}
    plain, first = check(zoo.epoch_loader, **kwargs), check(zoo.epoch_loader, exitfirst=True, **kwargs)
    assert first.stopped_at is None and first.passed
    assert [(r.id, r.status) for r in plain.results] == [(r.id, r.status) for r in first.results]


@pytest.mark.parametrize("loader, verdict", [(zoo.OffByOneResume, "fail"), (zoo.epoch_loader, "pass")])
def test_a_prerequisite_passing_against_its_declaration_is_told_and_stops_no_run(loader: Any, verdict: str) -> None:
    """SC01 runs for SC10 only, and passes though declared an expected failure: its stale declaration is told in
    a note, with or without -x, and -x judges SC10 as the run without it does. It stopped the run, the verdict
    was NOT JUDGED and the table named neither SC01 nor why."""
    kwargs: CheckKeywords = {"clauses": ["SC10"], "space": IN_PROCESS, "profile": "dev", "seed": 1, "jobs": 1,
                             "expected_failures": {"SC01": "a declaration gone stale"}}
    plain, first = check(loader, **kwargs), check(loader, exitfirst=True, **kwargs)
    for report in (plain, first):
        assert report.verdict == verdict and report["SC10"].status in ("failed", "passed"), report.notes
        assert any(n.startswith("SC01 ran because a selected clause needs it and passed, though declared an expected "
                                "failure ('a declaration gone stale'): the declaration is stale") for n in report.notes)
    assert first.stopped_at == ("SC10" if verdict == "fail" else None)


def test_the_cli_x_prints_the_reproduction_and_names_the_clauses_not_run(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    assert main(["check", "zoo:KeywordOnlyLoad", "-x", "--quiet", "--profile", "dev", "--jobs", "1",
                 "--json", str(path)]) == 1
    out = capsys.readouterr().out
    assert "Reproduce:" in out  # the failing clause's reproduction, in full
    assert "stopped at the first failure, SC02 (-x/--exitfirst)" in out and "--clause SC03," in out
    assert "ran through" not in out  # no other clause ran, through either form of load_state_dict
    data = json.loads(path.read_text())
    assert data["stopped_at"] == "SC02" and data["report_format"] >= 7
