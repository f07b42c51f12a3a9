"""The plugin among the tools a suite already runs: Hypothesis profiles, pytest-xdist, pytest-timeout.

Each downstream directory is fresh (pytester) and holds a contract class next to a plain
Hypothesis test, as a user's suite does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings

from stateful_contract import Report

pytest_plugins = ["pytester"]

HEADER = """
from hypothesis import given, settings, strategies as st
from stateful_contract import ConfigSpace
from stateful_contract.reference import factories
from stateful_contract.testing import StatefulLoaderContract

SMALL = ConfigSpace(num_workers=(0,), dataset_size=(1, 6), batch_size=(1, 2), grad_acc_step=(1, 3))


class TestReference(StatefulLoaderContract):
    config_space = SMALL

    def make_loader(self, config):
        return factories.reference_wrapper(config)
"""

SEED_CLASS = """

class TestSeed(StatefulLoaderContract):
    config_space = SMALL

    def make_loader(self, config):
        return factories.mindspeed_wrapper(config)
"""

PLAIN = """

@given(st.integers())
def test_plain(x):
    # Hypothesis' own profile: "default", or "ci" where Hypothesis detects a CI machine (it
    # then drops the database and derandomizes by itself). The contract's must not reach here.
    name = settings.get_current_profile_name()
    assert name in ("default", "ci"), name
    assert settings().max_examples == 100
    assert settings().database == settings.get_profile(name).database
"""

#: Counts the checks: each call of the mixin's `check` appends its class and worker.
COUNTING_CONFTEST = """
import os
import stateful_contract.faces.testing as testing  # the mixin's module, where it looks `check` up

_check = testing.check


def _counting(*args, **kwargs):
    with open(os.path.join(os.path.dirname(__file__), "checks.log"), "a") as log:
        log.write(f"{kwargs['target']} {os.environ.get('PYTEST_XDIST_WORKER', 'controller')}\\n")
    return _check(*args, **kwargs)


testing.check = _counting
"""


@pytest.fixture(autouse=True)
def keep_hypothesis_profile() -> Iterator[None]:
    """In-process runs load the profile named on their command line; restore ours."""
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


def checks(path: Path) -> list[str]:
    log = path / "checks.log"
    return sorted(log.read_text().splitlines()) if log.exists() else []


# --- the plugin's own profile option ------------------------------------------------------


@pytest.mark.acceptance  # pytest in a fresh process importing torch (51 s at load 9, 2026-12-07); the same with the
# profile from the environment or the ini file, the plain test on its own profile, runs in-process below
def test_the_profile_option_leaves_other_hypothesis_tests_on_their_profile(pytester: pytest.Pytester) -> None:
    """The acceptance run, in a fresh process: the contract on ``dev``, the plain test on Hypothesis' default."""
    pytester.makepyfile(test_loaders=HEADER + PLAIN)
    result = pytester.runpytest_subprocess("--stateful-contract-profile", "dev", "-k", "SC01 or plain",
                                           "--contract-report", "r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert Report.from_json(pytester.path / "r.json").profile == "dev"


@pytest.mark.parametrize("where", ["env", "ini"])
def test_the_profile_also_comes_from_the_environment_and_the_ini_file(
    where: str, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_loaders=HEADER + PLAIN)
    if where == "env":
        monkeypatch.setenv("STATEFUL_CONTRACT_PROFILE", "dev")
    else:
        pytester.makeini("[pytest]\nstateful_contract_profile = dev\n")
    result = pytester.runpytest("-k", "SC01 or plain", "--contract-report", "r.json")
    result.assert_outcomes(passed=2)
    assert Report.from_json(pytester.path / "r.json").profile == "dev"


def test_the_command_line_wins_over_the_environment_which_wins_over_the_ini_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stateful_contract.faces.pytest_plugin import run_profile

    pytester.makeini("[pytest]\nstateful_contract_profile = thorough\n")
    assert run_profile(pytester.parseconfig()) == "thorough"
    monkeypatch.setenv("STATEFUL_CONTRACT_PROFILE", "ci")
    assert run_profile(pytester.parseconfig()) == "ci"
    assert run_profile(pytester.parseconfig("--stateful-contract-profile", "dev")) == "dev"


def test_an_unknown_profile_in_the_environment_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_loaders=HEADER)
    monkeypatch.setenv("STATEFUL_CONTRACT_PROFILE", "fast")
    result = pytester.runpytest("--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown profile 'fast' from the environment variable STATEFUL_CONTRACT_PROFILE*"])


def test_the_hypothesis_profile_still_works_and_says_it_is_deprecated(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=HEADER)
    result = pytester.runpytest("--hypothesis-profile", "stateful-contract-dev", "-k", "SC01",
                                "--contract-report", "r.json")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*DeprecationWarning: --hypothesis-profile stateful-contract-dev switches every "
                                 "Hypothesis test*--stateful-contract-profile dev*"])
    assert Report.from_json(pytester.path / "r.json").profile == "dev"


def test_the_terminal_summary_shows_each_class_its_coverage_and_its_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=HEADER)
    result = pytester.runpytest("--stateful-contract-profile", "dev", "--stateful-contract-seed", "11", "-k", "SC10")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*- StatefulLoader contract -*",
                                 "test_loaders.py::TestReference: pass, 1 clause, profile dev",
                                 "  coverage: checkpoints *at window boundaries*(seed 11); checkpoint space: * of * points (*"])


def test_a_failure_from_a_pytest_report_replays_from_the_command_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from stateful_contract.faces.cli import main

    pytester.makepyfile(test_loaders=HEADER + SEED_CLASS)
    result = pytester.runpytest("-k", "TestSeed and SC10", "--contract-report", "r.json")
    result.assert_outcomes(failed=1)
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert main(["replay", "r.json", "SC10"]) == 1
    out = capsys.readouterr().out
    assert "replaying SC10 resume-continues-the-stream on test_loaders.py:TestSeed" in out
    assert "SC10 fails again:" in out


#: A user's own pytest configuration: warnings are errors, pytest's importlib import mode, a
#: Hypothesis profile of its own loaded by its conftest, and a Hypothesis test that counts its examples.
USERS_CONFIGURATION = {
    "pytest.ini": "[pytest]\naddopts = --import-mode=importlib\nfilterwarnings =\n    error\n",
    "tests/conftest.py": "from hypothesis import settings\n\n"
                         "settings.register_profile('mine', max_examples=3)\nsettings.load_profile('mine')\n",
    "tests/test_mine.py": "from hypothesis import given, strategies as st\n\nSEEN = []\n\n\n"
                          "@given(st.integers())\ndef test_mine(x):\n    SEEN.append(x)\n\n\n"
                          "def test_mine_ran_my_profile():\n    assert len(SEEN) == 3\n",
}


@pytest.mark.acceptance  # two checks in a pytest run of its own (about 15 s at load 8)
def test_a_users_own_configuration_and_the_contract_keep_apart(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Run from tests/, as a user in that folder does: the ini file above it still applies. In a process of its
    # own, as the user's pytest is: in this one, under pytest's console script, the package was imported before
    # this repository's root (pyproject's pythonpath) put its egg-info on sys.path, and the inner run's plugin
    # scan then marked it for rewriting too late: a PytestAssertRewriteWarning, an error under the user's
    # filterwarnings (it passed only under xdist, whose workers see the root from their start).
    for name, text in USERS_CONFIGURATION.items():
        (pytester.path / name).parent.mkdir(exist_ok=True)
        (pytester.path / name).write_text(text)
    (pytester.path / "tests" / "test_loaders.py").write_text(HEADER + SEED_CLASS)
    monkeypatch.chdir(pytester.path / "tests")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-k", "SC10 or mine",
                                           "--stateful-contract-profile", "dev", "--stateful-contract-seed", "1",
                                           "--contract-report", "r-{name}.json")
    # The user's test ran its 3 examples after the checks: the contract left the user's profile loaded.
    result.assert_outcomes(passed=3, failed=1)
    # The contract's searches kept their profile: dev's 15 examples and more, not the user's 3.
    passing = Report.from_json(pytester.path / "tests" / "r-TestReference.json")
    assert passing["SC10"].status == "passed" and passing["SC10"].examples >= 15, passing["SC10"]
    assert Report.from_json(pytester.path / "tests" / "r-TestSeed.json")["SC10"].status == "failed"
    # Under the importlib mode the module is `tests.test_loaders`, which tests/ cannot import: the reproduction
    # names the file.
    result.stdout.fnmatch_lines(["    import runpy; factory = runpy.run_path('test_loaders.py')['TestSeed']().make_loader"])


# --- pytest-xdist ---------------------------------------------------------------------------


# pytest in pytest under xdist, three interpreters importing torch: 35-51 s each at load 5, which the README's
# suite cannot afford (7 min on 2 cores); `nox -s acceptance` runs them, and CI runs both.
@pytest.mark.acceptance
def test_under_xdist_each_class_is_checked_once_and_the_controller_writes_the_reports(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_loaders=HEADER + SEED_CLASS + PLAIN)
    pytester.makeconftest(COUNTING_CONFTEST)
    selected = "SC01 or SC02 or SC10 or SC12 or plain"
    # ci: derandomized, so the seed's SC10 failure is found on every run (dev's 15 random examples may miss it).
    result = pytester.runpytest_subprocess("-n", "2", "--stateful-contract-profile", "ci", "-k", selected,
                                           "--contract-report", "reports/{name}.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=7, failed=2)  # the seed fails SC02 and SC10
    logged = checks(pytester.path)
    assert [line.split()[0] for line in logged] == ["test_loaders.py::TestReference", "test_loaders.py::TestSeed"]
    assert all(line.split()[1].startswith("gw") for line in logged)  # on the workers, never the controller
    assert sorted(p.name for p in (pytester.path / "reports").iterdir()) == ["TestReference.json", "TestSeed.json"]
    seed = json.loads((pytester.path / "reports/TestSeed.json").read_text())
    judged = {c["id"]: c["status"] for c in seed["clauses"] if c["status"] != "skipped"}
    assert judged == {"SC01": "passed", "SC02": "failed", "SC10": "failed", "SC12": "passed"}


@pytest.mark.acceptance  # as the test above
def test_under_xdist_one_class_makes_one_merged_report(pytester: pytest.Pytester) -> None:
    """The issue's "done when": a fresh directory with one contract class, ``pytest -n 2``."""
    pytester.makepyfile(test_loaders=HEADER + PLAIN)
    pytester.makeconftest(COUNTING_CONFTEST)
    result = pytester.runpytest_subprocess("-n", "2", "--stateful-contract-profile", "dev",
                                           "-k", "SC01 or SC03 or SC10 or SC12 or SC14 or plain",
                                           "--contract-report", "r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    assert len(checks(pytester.path)) == 1
    assert sorted(p.name for p in pytester.path.glob("*.json")) == ["r.json"]
    report = Report.from_json(pytester.path / "r.json")
    assert {r.id for r in report.results if r.status == "passed"} == {"SC01", "SC03", "SC10", "SC12", "SC14"}
    result.stdout.fnmatch_lines(["wrote r.json (pass)"])


def test_reports_of_one_class_from_several_workers_merge_clause_by_clause() -> None:
    from stateful_contract.faces.xdist import contract_scope, merge_report
    from stateful_contract.report.results import ClauseResult

    def report(**statuses: str) -> Report:
        return Report("t", [ClauseResult(status, id=cid, name=cid.lower(), tier="core")  # type: ignore[arg-type]
                            for cid, status in statuses.items()])

    merged: dict[str, Report] = {}
    merge_report(merged, "t.py::TestA", report(SC01="passed", SC10="skipped"))
    merge_report(merged, "t.py::TestA", report(SC01="skipped", SC10="failed"))
    assert [r.status for r in merged["t.py::TestA"].results] == ["passed", "failed"]
    assert contract_scope("t.py::TestA::test_clause[SC10-resume-continues-the-stream]") == "t.py::TestA"
    assert contract_scope("t.py::TestA::test_other") is None


class _Worker:
    """What xdist's scheduler sees of a worker: an id, the tests it is sent, whether it was told to stop."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: Sequence[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def _schedule(collection: list[str], dist: str = "loadgroup") -> dict[str, str]:
    """Each test's worker when ``pytest -n 2 --dist DIST`` runs ``collection``, driven as xdist's controller
    drives the scheduler the plugin makes (the ``pytest_xdist_make_scheduler`` protocol): both workers collect,
    then each runs what it is sent and reports each test complete."""
    from stateful_contract.faces.xdist import XdistHooks

    config = SimpleNamespace(getvalue=lambda name: dist if name == "dist" else ["2*popen"], getoption=lambda name: None,
                             option=SimpleNamespace(loadscopereorder=True, maxschedchunk=None))
    scheduler = XdistHooks(config, None).pytest_xdist_make_scheduler(config, None)
    assert scheduler is not None
    workers = [_Worker("gw0"), _Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    ran_on: dict[str, str] = {}
    while any(worker.sent for worker in workers):
        for worker in workers:  # the two run side by side: one test each in turn
            if worker.sent:
                index = worker.sent.pop(0)
                ran_on[collection[index]] = worker.gateway.id
                scheduler.mark_test_complete(worker, index)
    assert sorted(ran_on) == sorted(collection) and not scheduler.has_pending
    return ran_on


@pytest.mark.parametrize("grouped", [False, True], ids=["pytest 9.2", "before 9.2"])
def test_under_loadgroup_each_contract_class_runs_on_one_worker_and_the_users_groups_stay_theirs(
    grouped: bool,
) -> None:
    """pytest 9.2 no longer lets xdist append a test's group to its node id (pytest-dev/pytest-xdist#1386): each
    contract class is one unit of work with or without its group in the id; the user's own groups, and ids
    holding an "@" before their "]", are scheduled as xdist schedules them."""
    def clause_tests(cls: str) -> list[str]:
        tests = [f"t.py::{cls}::test_clause[{cid}]" for cid in ("SC01-implements-protocol", "SC10-resume-x",
                                                                  "SC11-hops")]
        return [f"{t}@stateful-contract:t.py::{cls}" if grouped else t for t in tests]

    mine = [f"t.py::test_mine[{n}]@mine" for n in range(3)] if grouped else []
    others = ["t.py::test_at[a@b]", "t.py::test_at[c@d]", *(f"t.py::test_plain[{n}]" for n in range(4))]
    ran_on = _schedule([*clause_tests("TestA"), *mine, *clause_tests("TestB"), *others])
    for unit in (clause_tests("TestA"), clause_tests("TestB"), mine):
        assert len({ran_on[t] for t in unit}) <= 1, ran_on
    assert len({ran_on[t] for t in others}) == 2, ran_on  # the rest spread over both workers


#: A user's own xdist groups, and ids holding "@" (which xdist reads as a group only after the id's "]").
GROUPED = """

@pytest.mark.xdist_group("mine")
@pytest.mark.parametrize("n", range(3))
def test_mine(n):
    pass


@pytest.mark.parametrize("at", ["a@b", "c@d"])
def test_at_in_the_id(at):
    pass
"""


@pytest.mark.acceptance  # pytest in pytest under xdist, as the tests above
def test_a_loadgroup_run_puts_a_contract_class_on_one_worker_and_the_users_groups_as_xdist_does(
    pytester: pytest.Pytester,
) -> None:
    """The scheduler above in a real ``pytest -n 2 --dist loadgroup`` run, with the node ids of the pytest
    installed (the test above drives it with both forms)."""
    pytester.makepyfile(test_loaders="import pytest\n" + HEADER + GROUPED)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "--stateful-contract-profile",
                                           "dev", "-k", "SC01 or SC02 or SC03 or mine or at_in", "-p",
                                           "no:cacheprovider")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["scheduling tests via ContractGroupScheduling"])
    ran_on: dict[str, set[str]] = {}
    for worker, nodeid in re.findall(r"\[(gw\d+)\].* PASSED (\S+)", result.stdout.str()):
        ran_on.setdefault(nodeid.split("::")[1].split("[")[0], set()).add(worker)
    assert ran_on.keys() == {"TestReference", "test_mine", "test_at_in_the_id"}, ran_on
    assert len(ran_on["TestReference"]) == 1 and len(ran_on["test_mine"]) == 1, ran_on


# --- pytest-timeout -------------------------------------------------------------------------


@pytest.mark.acceptance  # pytest in pytest running a check, then a hang (32 s at load 12)
def test_pytest_timeout_still_fires_after_a_check(pytester: pytest.Pytester) -> None:
    """The engine's per-example alarm must leave pytest-timeout's (signal method) pending."""
    pytester.makepyfile(test_timeout=HEADER + """

import time

from stateful_contract import check


def test_checks_then_hangs():
    report = check(factories.reference_wrapper, clauses=["SC10"], space=SMALL, profile="dev")
    assert report.passed
    time.sleep(3600)  # pytest-timeout ends this
""")
    result = pytester.runpytest_subprocess("--timeout", "8", "--timeout-method", "signal", "-p", "no:cacheprovider",
                                           "-k", "hangs")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Failed: Timeout (>8.0s) from pytest-timeout.*"])
    # Ended by the timer, not by the hour's sleep. The run's start-up and check are seconds of CPU that a
    # shared machine stretches (62 s at a load of 13, against under 40 quiet): the bound is the sleep's.
    assert result.duration < 600


# --- Hypothesis' statistics ---------------------------------------------------------------


def test_hypothesis_statistics_show_the_contracts_searches_and_what_they_covered(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=HEADER)
    result = pytester.runpytest("--stateful-contract-profile", "dev", "-k", "SC11", "--hypothesis-show-statistics")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*Hypothesis Statistics*",
        "test_loaders.py::TestReference::test_clause[SC11-resume-survives-several-hops]: the contract's search of "
        "SC11 resume-survives-several-hops:",
        "*Events:",
        "*%, resume hops",
    ])
    result.stdout.fnmatch_lines(["*%, checkpoint at a window boundary"])


# --- a suite without a contract class -------------------------------------------------------

#: What a test of an unrelated suite can see of its run: the Hypothesis profile and its settings,
#: the registered profiles, the warnings filters, the options' values.
OBSERVING = """
import json, os, warnings

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.errors import InvalidArgument


def observe(request, name):
    try:
        settings.get_profile("stateful-contract-dev")
        ours = True
    except InvalidArgument:
        ours = False
    seen = {"profile": settings.get_current_profile_name(), "max_examples": settings().max_examples,
            "database": repr(settings().database), "our_profiles": ours,
            "filters": [repr(f) for f in warnings.filters], "maxfail": request.config.getoption("maxfail")}
    with open(os.path.join(os.path.dirname(__file__), name + ".json"), "w") as out:
        json.dump(seen, out)


@pytest.mark.parametrize("n", range(4))
def test_numbers(n, request):
    observe(request, f"numbers{n}")


@settings(deadline=None)  # a loaded machine takes Hypothesis' 200 ms for an example now and then
@given(st.integers())
def test_hypothesis(x):
    assert isinstance(x, int)


def test_observed(request):
    observe(request, "observed")
"""


# Pytest in pytest under xdist, twice per scheduler (68 s for `load` at load 9, 2026-12-07): `nox -s acceptance`.
# The plugin's scheduler itself is driven without a pytest run in the README's suite
# (test_under_load_each_contract_class_runs_on_one_worker_and_the_rest_spreads).
@pytest.mark.acceptance
@pytest.mark.parametrize("dist", ["load", "loadgroup"])
def test_a_suite_without_a_contract_class_runs_exactly_as_without_the_package(
    dist: str, pytester: pytest.Pytester
) -> None:
    """Installed, the plugin changes nothing for a suite that never uses the contract: xdist's own scheduler
    for the mode, the same outcomes, Hypothesis profiles, warnings filters and option values."""
    pytester.makepyfile(test_other=OBSERVING)
    runs = {}
    for plugin in ("on", "off"):
        args = ["-n", "2", "--dist", dist, "-v", "-p", "no:cacheprovider"] + (["-p", "no:stateful_contract"]
                                                                               if plugin == "off" else [])
        result = pytester.runpytest_subprocess(*args)
        result.assert_outcomes(passed=6)
        scheduler = [line for line in result.outlines if line.startswith("scheduling tests via")]
        seen = {p.stem: json.loads(p.read_text()) for p in pytester.path.glob("*.json")}
        runs[plugin] = (scheduler, seen)
    assert runs["on"] == runs["off"]
    expected = {"load": "LoadScheduling", "loadgroup": "LoadGroupScheduling"}[dist]
    assert runs["on"][0] == [f"scheduling tests via {expected}"]
    assert not any(seen["our_profiles"] for seen in runs["on"][1].values())


def test_under_load_each_contract_class_runs_on_one_worker_and_the_rest_spreads() -> None:
    """``--dist load`` (xdist's default): the plugin's scheduler keeps each contract class on one worker and
    spreads every other test, as xdist would; a suite without a contract class gets xdist's own scheduler."""
    classes = [f"t.py::{cls}::test_clause[{cid}]" for cls in ("TestA", "TestB")
               for cid in ("SC01-implements-protocol", "SC10-resume-x", "SC11-hops")]
    others = [f"t.py::test_plain[{n}]" for n in range(6)]
    ran_on = _schedule([*classes, *others], dist="load")
    for cls in ("TestA", "TestB"):
        assert len({ran_on[t] for t in classes if f"::{cls}::" in t}) == 1, ran_on
    assert len({ran_on[t] for t in others}) == 2, ran_on


@pytest.mark.acceptance  # pytest in pytest under xdist, as the tests above (56 s at load 15); the scheduler itself is
# driven without a pytest run by test_under_load_each_contract_class_runs_on_one_worker_and_the_rest_spreads
def test_a_suite_with_a_contract_class_schedules_each_class_as_one_unit(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=HEADER)
    result = pytester.runpytest_subprocess("-n", "2", "-v", "--stateful-contract-profile", "dev",
                                           "-k", "SC01", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["scheduling tests via ContractScheduling"])


#: Writes, in every process of the run (xdist's controller and its workers), which heavy modules it imported.
IMPORTS_CONFTEST = """
import json, os, sys


def pytest_sessionfinish(session):
    # Not PYTEST_XDIST_WORKER: an outer xdist run (this suite's own) leaves it set in the inner controller.
    worker = getattr(session.config, "workerinput", None)
    who = worker["workerid"] if worker else "main"
    with open(os.path.join(os.path.dirname(__file__), f"imported-{who}.json"), "w") as out:
        json.dump(sorted(m for m in ("hypothesis", "torch") if m in sys.modules), out)
"""


# Under xdist: three interpreters per run, two runs (35 s at load 15): acceptance; the plain variant stays in the suite.
@pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.acceptance)], ids=["plain", "xdist"])
def test_a_suite_without_a_contract_class_imports_hypothesis_no_sooner_than_without_the_package(
    xdist: list[str], pytester: pytest.Pytester
) -> None:
    """Hypothesis' own plugin leaves Hypothesis unimported until a test needs it (until its terminal summary, which
    comes after the session's end); installed, this one imports nothing more, in any process of the run: a suite
    without a contract class imports neither Hypothesis nor torch, in xdist's controller or its workers."""
    pytester.makeconftest(IMPORTS_CONFTEST)
    pytester.makepyfile(test_other="def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    runs = {}
    for plugin in ("on", "off"):
        result = pytester.runpytest_subprocess(*xdist, "-p", "no:cacheprovider",
                                               *(["-p", "no:stateful_contract"] if plugin == "off" else []))
        result.assert_outcomes(passed=2)
        runs[plugin] = {p.stem: json.loads(p.read_text()) for p in pytester.path.glob("imported-*.json")}
    assert runs["on"] == runs["off"]
    assert len(runs["on"]) == (3 if xdist else 1), runs
    assert all(imported == [] for imported in runs["on"].values()), runs
