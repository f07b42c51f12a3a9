"""Hypothesis' conventions, as its users know them: ``--hypothesis-seed`` seeds the contract's search, a failure
found once is tried first on the next run (kept outside the working tree), and a global ``--timeout`` leaves the
contract's own limits in charge."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from charged import run as run_charged

from stateful_contract import Report, check
from stateful_contract.profiles import DATABASE_ENV, examples_home

pytest_plugins = ["pytester"]

CLASS = """
from stateful_contract import ConfigSpace
from stateful_contract.reference import factories
from stateful_contract.testing import StatefulLoaderContract


class TestReference(StatefulLoaderContract):
    config_space = ConfigSpace(num_workers=(0,), dataset_size=(1, 6), batch_size=(1, 2), grad_acc_step=(1, 3))

    def make_loader(self, config):
        return factories.reference_wrapper(config)
"""


def test_hypothesis_seed_seeds_the_contracts_search(pytester: pytest.Pytester) -> None:
    """Two runs with ``--hypothesis-seed 1`` draw the same examples (the same seed, the same coverage)."""
    pytester.makepyfile(test_loaders=CLASS)
    reports = []
    for run in ("a", "b"):
        result = pytester.runpytest("--stateful-contract-profile", "dev", "--hypothesis-seed", "1", "-k", "SC10",
                                    "--contract-report", f"{run}.json", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
        reports.append(Report.from_json(pytester.path / f"{run}.json"))
    assert reports[0].seed == reports[1].seed == 1
    assert reports[0]["SC10"].coverage == reports[1]["SC10"].coverage and reports[0]["SC10"].examples > 1


def test_a_derandomized_profile_ignores_the_hypothesis_seed_as_hypothesis_does(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=CLASS)
    result = pytester.runpytest("--hypothesis-seed", "1", "-k", "SC01", "--contract-report", "r.json",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert Report.from_json(pytester.path / "r.json").seed is None  # ci: derandomized


def test_a_failure_found_under_dev_is_tried_first_on_the_next_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATABASE_ENV, str(tmp_path / "examples"))
    first = check("zoo:OffByOneResume", clauses=["SC10"], profile="dev")["SC10"]
    assert first.status == "failed" and first.found_after is not None
    again = check("zoo:OffByOneResume", clauses=["SC10"], profile="dev")["SC10"]
    assert (again.status, again.found_after, again.examples) == ("failed", 1, 1)
    assert (again.config, again.plan) == (first.config, first.plan)
    # Once the loader is fixed the kept example passes and is dropped: the run after searches afresh.
    assert check("zoo:epoch_loader", clauses=["SC10"], profile="dev", target="zoo:OffByOneResume").passed
    assert check("zoo:OffByOneResume", clauses=["SC10"], profile="dev")["SC10"].examples > 1
    # ci is derandomized and keeps none; a run given its seed neither tries nor keeps one.
    assert check("zoo:OffByOneResume", clauses=["SC10"], profile="dev", seed=5)["SC10"].examples > 1


def test_the_kept_failures_live_in_the_user_cache_not_the_working_tree(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home = examples_home()
    assert home is not None and home.is_relative_to(tmp_path / "cache")
    monkeypatch.setenv(DATABASE_ENV, "none")
    assert examples_home() is None


@pytest.mark.acceptance  # pytest in pytest running a check under a global timeout (36 s at load 12)
def test_a_global_timeout_leaves_the_contract_to_its_own_limits(pytester: pytest.Pytester) -> None:
    """``pytest --timeout 1``: the whole check runs inside the first clause test; without the class's own
    ``timeout(0)`` mark pytest-timeout ended it there and every clause test errored."""
    pytester.makepyfile(test_loaders=CLASS)
    result = pytester.runpytest_subprocess("--timeout", "1", "--stateful-contract-profile", "dev",
                                           "-k", "SC01 or SC10 or SC11", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


@pytest.mark.acceptance  # pytest in pytest running a check (26 s at load 12)
def test_a_timeout_mark_of_the_users_own_wins(pytester: pytest.Pytester) -> None:
    """The class's clause tests carry timeout(0) unless the class (or module) has a timeout mark of its own.
    Collected only: a timeout that fires inside the check's own examples is no subject here. Both classes, each
    in a module of its own, in one collection: one new interpreter importing torch instead of two."""
    pytester.makeconftest("""
def pytest_collection_modifyitems(items):
    for module in sorted({item.module.__name__ for item in items}):
        mine = [item for item in items if item.module.__name__ == module]
        marks = {str(item.get_closest_marker("timeout").args) for item in mine if item.get_closest_marker("timeout")}
        print(f"timeouts in {module}:", sorted(marks), len(mine))
""")
    marked = CLASS.replace("class TestReference", "@pytest.mark.timeout(600)\nclass TestReference").replace(
        "from stateful_contract import", "import pytest\nfrom stateful_contract import")
    pytester.makepyfile(test_loaders=CLASS, test_marked=marked)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-s", "-p", "no:cacheprovider")
    for module, expected in (("test_loaders", "['(0,)']"), ("test_marked", "['(600,)']")):
        assert f"timeouts in {module}: {expected} " in result.stdout.str(), result.stdout.str()


def test_a_hypothesis_without_the_internals_used_degrades_with_a_clear_message() -> None:
    """hypothesis.configuration is not public API: where its functions moved, the check runs on and says what
    it cannot do, instead of crashing every run. In a process of its own, as a user's run meets it: the warning
    is given once per process, and this one has given it nothing yet."""
    code = textwrap.dedent("""
        import warnings
        import hypothesis.configuration
        del hypothesis.configuration.storage_directory  # a Hypothesis where it moved
        from stateful_contract import check
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            print("passed" if check("zoo:epoch_loader", clauses=["SC01"]).passed else "failed")
        print(*(str(w.message) for w in caught if issubclass(w.category, UserWarning)), sep="\\n")
    """)
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    done = run_charged([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                       check=False)
    assert done.returncode == 0 and done.stdout.startswith("passed\n"), done.stdout + done.stderr
    assert "has no hypothesis.configuration.storage_directory" in done.stdout, done.stdout
