"""An exception raised by the checker's own code is its bug, not a verdict on the loader.

Every call into the loader is a step, and what the loader raises arrives as a `LoaderError`; anything else
raised in the package's code read as "silent: not reproducible: one example, two results", a flaky loader
(met while adding a clause, whose NameError failed SC20 of a correct loader that way). It is now not
judged, saying it is the checker's bug, where, and where to report it.
"""

from __future__ import annotations

from stateful_contract import LoaderConfig
from stateful_contract.links import ISSUES
from stateful_contract.repro.outcome import outcome_of, raised_in_the_checker


def _the_checkers_error() -> ValueError:
    try:
        LoaderConfig(dataset_size=0)  # raises in stateful_contract/config.py
    except ValueError as e:
        return e
    raise AssertionError("LoaderConfig accepted dataset_size=0")


def _a_loaders_error() -> ValueError:
    try:
        raise ValueError("the loader's own")
    except ValueError as e:
        return e


def test_an_error_raised_in_the_package_is_not_judged_as_the_checkers_bug() -> None:
    error = _the_checkers_error()
    assert raised_in_the_checker(error) is not None and "config.py" in str(raised_in_the_checker(error))
    outcome = outcome_of(error, heading="SC10 resume-continues-the-stream: ...")
    assert outcome.status == "not-judged"
    assert outcome.got.startswith("stateful-contract itself raised ValueError: dataset_size must be >= 1")
    assert "a bug of the checker, not a verdict on the loader" in outcome.got and ISSUES in outcome.got
    assert "Traceback" in outcome.detail and outcome.impact is None


def test_an_error_raised_elsewhere_keeps_its_verdict() -> None:
    error = _a_loaders_error()
    assert raised_in_the_checker(error) is None
    outcome = outcome_of(error, heading="SC10 resume-continues-the-stream: ...")
    assert outcome.status == "failed" and outcome.expected == "a verdict that replays"


def test_the_engines_own_verdicts_raised_in_the_package_are_not_its_bugs() -> None:
    """A violation is raised by the package's code too: it must shrink and fail as before."""
    from stateful_contract.clauses.judgements import same_stream

    try:
        same_stream([1, 2], [1, 3], clause_id="SC10", context="")  # raises in clauses/judgements.py
    except AssertionError as e:
        assert raised_in_the_checker(e) is None
    else:
        raise AssertionError("same_stream passed two different streams")


def test_the_address_is_pyprojects() -> None:
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'Issues = "{ISSUES}"' in pyproject.split("[project.urls]", 1)[1].split("\n[", 1)[0]
