"""The pytest plugin: entry point, marker, Hypothesis profiles and ``--contract-report``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from stateful_contract import CONTRACT_VERSION, Report
from stateful_contract.faces.cli import main
from stateful_contract.faces.pytest_plugin import report_names, report_paths

pytest_plugins = ["pytester"]

DOWNSTREAM = """
from stateful_contract import ConfigSpace
from stateful_contract.reference import factories
from stateful_contract.testing import StatefulLoaderContract

SMALL = ConfigSpace(num_workers=(0,), dataset_size=(1, 6), batch_size=(1, 2), grad_acc_step=(1, 3))


class TestReference(StatefulLoaderContract):
    config_space = SMALL

    def make_loader(self, config):
        return factories.reference_wrapper(config)


class TestSeed(StatefulLoaderContract):
    config_space = SMALL

    def make_loader(self, config):
        return factories.mindspeed_wrapper(config)


def test_something_else():
    pass
"""


@pytest.fixture(autouse=True)
def keep_hypothesis_profile() -> Iterator[None]:
    """In-process runs load the profile named on their command line; restore ours."""
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


def test_the_plugin_is_loaded_through_its_entry_point(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    assert config.pluginmanager.has_plugin("stateful_contract")
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--contract-report=PATH*"])


def test_it_registers_the_marker(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.stateful_contract: a clause of the StatefulLoader contract*"])


def test_the_marker_selects_the_contract_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=DOWNSTREAM)
    only = pytester.runpytest("--collect-only", "-q", "--strict-markers", "-m", "stateful_contract")
    selected = [line for line in only.outlines if "::" in line]
    assert selected, "the marker selected nothing: the contract's tests lost their mark"
    assert all("test_clause[" in line for line in selected)
    others = pytester.runpytest("--collect-only", "-q", "-m", "not stateful_contract")
    assert [line for line in others.outlines if "::" in line] == ["test_loaders.py::test_something_else"]


def test_hypothesis_profiles_select_the_engine_profile(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=DOWNSTREAM)
    result = pytester.runpytest(
        "--hypothesis-profile", "stateful-contract-dev", "-k", "TestReference and SC01", "--contract-report", "r.json"
    )
    result.assert_outcomes(passed=1)
    assert Report.from_json(pytester.path / "r.json").profile == "dev"


def test_contract_report_writes_one_cli_format_report_per_class(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=DOWNSTREAM)
    result = pytester.runpytest("--hypothesis-profile", "stateful-contract-dev", "-k", "SC01 or SC02",
                                "--contract-report", "reports/contract.json")
    result.assert_outcomes(passed=3, failed=1)  # the seed's SC02 fails; test_something_else is deselected
    result.stdout.fnmatch_lines(
        ["*StatefulLoader contract reports*",
         "wrote reports/contract-TestReference.json (pass)",
         "wrote reports/contract-TestSeed.json (fail)"]
    )
    seed = json.loads((pytester.path / "reports/contract-TestSeed.json").read_text())
    assert seed["contract"] == "StatefulLoader contract" and seed["verdict"] == "fail"
    assert seed["target"] == "test_loaders.py::TestSeed"
    statuses = {c["id"]: c["status"] for c in seed["clauses"]}
    # Only the clauses whose tests ran were checked; the others are recorded as skipped.
    assert statuses["SC01"] == "passed" and statuses["SC02"] == "failed"
    assert {s for cid, s in statuses.items() if cid not in ("SC01", "SC02")} == {"skipped"}


def test_contract_report_with_a_single_class_uses_the_path_as_given(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=DOWNSTREAM)
    result = pytester.runpytest("-k", "TestReference and SC01", "--contract-report", "out.json")
    result.assert_outcomes(passed=1)
    assert Report.from_json(pytester.path / "out.json").passed


def test_contract_report_without_contract_tests_writes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=DOWNSTREAM)
    result = pytester.runpytest("-k", "something_else", "--contract-report", "out.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["stateful-contract: no contract tests ran, no report written"])
    assert not (pytester.path / "out.json").exists()


def test_report_paths() -> None:
    assert report_paths("r.json", ["TestA"]) == [Path("r.json")]
    assert report_paths("r.json", ["TestA", "TestB"]) == [Path("r-TestA.json"), Path("r-TestB.json")]
    assert report_paths("out/{name}.json", ["TestA", "TestB"]) == [Path("out/TestA.json"), Path("out/TestB.json")]


def test_report_names_of_classes_that_share_a_name_are_their_node_ids() -> None:
    # A TestLoader in two modules: named by the class alone, the second report overwrote the first, silently.
    assert report_names(["tests/test_a.py::TestLoader", "tests/test_b.py::TestLoader", "test_c.py::TestOther"]) == [
        "tests.test_a.TestLoader", "tests.test_b.TestLoader", "TestOther"]


@pytest.mark.acceptance  # two pytest-in-pytest checks (2.5 s at load 5)
def test_two_classes_of_one_name_write_two_reports(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**{f"tests/test_{m}": DOWNSTREAM.replace("TestSeed", "TestLoader") for m in "ab"})
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "TestLoader and SC01", "--contract-report", "r/{name}.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["wrote r/tests.test_a.TestLoader.json (pass)", "wrote r/tests.test_b.TestLoader.json (pass)"])
    assert sorted(p.name for p in (pytester.path / "r").iterdir()) == ["tests.test_a.TestLoader.json",
                                                                      "tests.test_b.TestLoader.json"]


def test_downstream_flow_in_a_fresh_process(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The acceptance run: pytest (a fresh process) with --contract-report, then the badge command."""
    pytester.makepyfile(test_loaders=DOWNSTREAM)
    result = pytester.runpytest_subprocess(
        "--hypothesis-profile", "stateful-contract-dev", "-k", "TestSeed and (SC01 or SC02 or SC03)",
        "--contract-report", "reports/seed.json",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2, failed=1)
    monkeypatch.chdir(pytester.path)
    assert main(["badge", "reports/seed.json", "--svg", "reports/seed.svg", "--endpoint", "reports/seed.endpoint.json"]) == 0
    endpoint = json.loads((pytester.path / "reports/seed.endpoint.json").read_text())
    assert endpoint == {"schemaVersion": 1, "label": f"StatefulLoader contract v{CONTRACT_VERSION}",
                        "message": "failing SC02: crashes on resume", "color": "red"}
    assert (pytester.path / "reports/seed.svg").read_text().startswith("<svg ")
