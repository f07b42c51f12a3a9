"""The mixin, end to end: a downstream test file in a fresh directory, run by pytest (pytester).

Each run uses the ``dev`` profile and a narrow configuration space so that the
whole module stays fast; the clauses themselves are the engine's tests' business.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from stateful_contract import Report
from stateful_contract.clauses import default_selection
from stateful_contract.faces.pytest_plugin import PROFILE_ENV, run_profile
from stateful_contract.faces.testing import StatefulLoaderContract, class_options
from stateful_contract.profiles import register_hypothesis_profiles

pytest_plugins = ["pytester"]

#: What every downstream file below starts with: the reference factories, a small space.
HEADER = """
from stateful_contract import ConfigSpace
from stateful_contract.reference import factories
from stateful_contract.testing import StatefulLoaderContract

SMALL = ConfigSpace(num_workers=(0,), dataset_size=(1, 6), batch_size=(1, 2), grad_acc_step=(1, 3))
"""

#: The ids pytest must show for a class that runs the default tiers (structure, core, trainer).
CORE_IDS = [f"{c.id}-{c.name}" for c in default_selection()]


def downstream(loader: str, body: str = "", *, profile: str = "dev") -> str:
    """A downstream test class for ``factories.<loader>``, with extra class attributes.

    Tests that need a failure to be found use ``profile="ci"``: derandomized, so the
    same examples every run, where ``dev``'s random 15 may miss a mid-window checkpoint.
    """
    attrs = "".join(f"    {line}\n" for line in body.strip().splitlines())
    return HEADER + (
        f"\nclass TestLoader(StatefulLoaderContract):\n"
        f"    config_space = SMALL\n"
        f"    profile = {profile!r}\n{attrs}\n"
        f"    def make_loader(self, config):\n"
        f"        return factories.{loader}(config)\n"
    )


@pytest.fixture(autouse=True)
def keep_hypothesis_profile() -> Iterator[None]:
    """In-process runs may load another Hypothesis profile; give this session its own back."""
    before = settings.get_current_profile_name()
    yield
    settings.load_profile(before)


def test_one_test_per_clause_with_the_clause_in_its_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("reference_wrapper"))
    result = pytester.runpytest("--collect-only", "-q")
    collected = [line for line in result.outlines if "::" in line]
    assert collected == [f"test_loader.py::TestLoader::test_clause[{i}]" for i in CORE_IDS]


def test_the_strict_tier_adds_its_clause(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("reference_wrapper", "strict = True"))
    result = pytester.runpytest("--collect-only", "-q")
    assert "test_loader.py::TestLoader::test_clause[SC40-bad-state-is-refused]" in result.outlines


@pytest.mark.acceptance  # a correct loader over a whole profile, in a pytest run (11 s at load 5)
def test_a_correct_loader_passes_every_clause(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("reference_wrapper"))
    result = pytester.runpytest("-v", "-rs")
    # SMALL allows one worker count, so SC23 (a change of count) is not judged; SC21 judges loaders
    # with a set_epoch, and the reference wrapper has none: two skips, each saying why.
    result.assert_outcomes(passed=len(CORE_IDS) - 2, skipped=2)
    result.stdout.fnmatch_lines(["*test_clause[[]SC21-set-epoch-loop-resumes-epoch-by-epoch[]] SKIPPED*"])
    result.stdout.fnmatch_lines(["*test_clause[[]SC10-resume-continues-the-stream[]] PASSED*"])
    result.stdout.fnmatch_lines(["*SC23 not-judged: the configuration space allows one number of worker processes*"])


def test_a_broken_loader_fails_with_the_clause_named_and_a_reproduction(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("mindspeed_wrapper", profile="ci"))
    result = pytester.runpytest("-k", "SC01 or SC02 or SC10")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*TestLoader.test_clause[[]SC02-load-accepts-positional-state[]]*",
            "SC02 load-accepts-positional-state: *",
            "Got: TypeError: MindSpeedPrefetchGradAccDataLoader.load_state_dict() takes 1 positional argument but 2 were given",
            "Reproduce:",
            "    from test_loader import TestLoader; factory = TestLoader().make_loader",
        ]
    )
    result.stdout.fnmatch_lines(["SC10 resume-continues-the-stream: *", "Checkpoint: *", "Expected: *", "Got: *"])
    # The failure is the clause's message, not a traceback into the suite.
    assert "stateful_contract/faces/testing.py" not in result.stdout.str()


@pytest.mark.acceptance  # a pytest run, then the printed reproduction in a new interpreter (torch's import)
def test_the_reproduction_runs_from_the_root_pytest_ran_in(pytester: pytest.Pytester) -> None:
    # The quickstart's layout: tests/test_loader.py, no __init__.py, pytest run from the root. pytest's default
    # import mode imports it as `test_loader`, which a python started in the root cannot import by that name.
    pytester.makepyfile(**{"tests/test_loader": downstream("mindspeed_wrapper")})
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "SC02")
    result.assert_outcomes(failed=1)
    lines = result.outlines[result.outlines.index("Reproduce:") + 1:]
    reproduction = "\n".join(line.removeprefix("    ") for line in lines[:next(
        i for i, line in enumerate(lines) if line and not line.startswith("    "))])
    assert "runpy.run_path('tests/test_loader.py')['TestLoader']().make_loader" in reproduction
    ran = pytester.run(sys.executable, "-c", reproduction)
    assert ran.ret == 1, ran.stderr.str()
    ran.stderr.fnmatch_lines(["TypeError: *load_state_dict() takes 1 positional argument but 2 were given"])


def test_a_declared_expected_failure_is_an_xfail_with_its_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("mindspeed_wrapper", "expected_failures = {'SC02': 'keyword-only load'}"))
    result = pytester.runpytest("-k", "SC02", "-rx")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["XFAIL *SC02-load-accepts-positional-state* - SC02 load-accepts-positional-state: keyword-only load"])


def test_a_declared_failure_that_passes_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("reference_wrapper", "expected_failures = {'SC02': 'stale'}"))
    result = pytester.runpytest("-k", "SC02")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*SC02 was declared an expected failure ('stale') but passed*"])


def test_a_checkpoint_alignment_is_honoured_and_reported(pytester: pytest.Pytester) -> None:
    # The seed's proposed fix is exact only at window boundaries: it fails SC10 as it
    # stands, and passes once the alignment is declared.
    pytester.makepyfile(
        test_anywhere=downstream("proposed_fix_wrapper", profile="ci").replace("TestLoader", "TestAnywhere"),
        test_aligned=downstream("proposed_fix_wrapper", "checkpoint_alignment = 'window'").replace("TestLoader", "TestAligned"),
    )
    result = pytester.runpytest("-k", "SC10", "--contract-report", "r-{name}.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_anywhere.py::TestAnywhere::test_clause[[]SC10-*"])
    aligned = Report.from_json(pytester.path / "r-TestAligned.json")
    assert aligned.checkpoint_alignment is not None and aligned.checkpoint_alignment.startswith("window")
    assert aligned["SC10"].status == "passed"


def test_the_check_runs_once_per_class_on_the_selected_clauses(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    from stateful_contract.run.check import check as real_check

    def spy(factory: Any, options: Any, **kwargs: Any) -> Report:
        calls.append({**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)}, **kwargs})
        return real_check(factory, options, **kwargs)

    monkeypatch.setattr("stateful_contract.faces.testing.check", spy)
    pytester.makepyfile(test_loader=downstream("stateful_dataloader", "expected_failures = {'SC17': 'why'}"))
    result = pytester.runpytest_inprocess("-k", "SC01 or SC12 or SC17")
    result.assert_outcomes(passed=2, failed=1)  # SC17 passes although declared: a stale declaration
    assert len(calls) == 1
    assert calls[0]["clauses"] == ("SC01", "SC12", "SC17")
    assert calls[0]["profile"] == "dev" and calls[0]["expected_failures"] == {"SC17": "why"}
    assert calls[0]["target"] == "test_loader.py::TestLoader"


def test_a_class_without_the_hook_errors_with_the_hook_named(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=HEADER + "\nclass TestNothing(StatefulLoaderContract):\n    pass\n")
    result = pytester.runpytest("-k", "SC01")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*TestNothing must implement make_loader(self, config)*"])


def test_a_hook_that_cannot_build_a_loader_errors_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_loader=HEADER
        + "\nclass TestBroken(StatefulLoaderContract):\n"
        + "    def make_loader(self, config):\n"
        + "        raise RuntimeError('no such dataset')\n"
    )
    result = pytester.runpytest("-k", "SC01 or SC10")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*TestBroken.make_loader cannot build a loader: *RuntimeError: no such dataset*"])


def test_a_loader_that_kills_its_process_fails_that_clause_not_the_pytest_run(pytester: pytest.Pytester) -> None:
    """Supervised by default: a segfault in load_state_dict is SC02's failure; this very pytest run goes on."""
    pytester.makepyfile(test_loader=(
        "import misbehaving\n"  # tests/misbehaving.py, importable here (conftest.py puts tests/ on sys.path)
        "from stateful_contract.testing import StatefulLoaderContract\n\n"
        "class TestSegfaults(StatefulLoaderContract):\n"
        "    profile = 'dev'\n"
        "    def make_loader(self, config):\n"
        "        return misbehaving.SegfaultsInLoad(config)\n"))
    result = pytester.runpytest("-k", "SC01 or SC02 or SC03")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*Got: the process was killed by signal SIGSEGV during loader.load_state_dict(state): the loader crashed it*",
                                 "*load(loader_2, state)  # <- the process died here (SIGSEGV)*"])


def test_an_expected_failure_naming_no_clause_warns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=downstream("stateful_dataloader", "expected_failures = {'SC99': 'typo'}"))
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*TestLoader.expected_failures names 'SC99', which is no clause of the contract*"])


def test_the_base_class_itself_is_not_collected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loader=HEADER)
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_the_profile_comes_from_the_hypothesis_profile_then_the_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    before = settings.get_current_profile_name()
    try:
        settings.load_profile("default")
        assert run_profile(None) is None  # nothing chosen: each class's own profile applies
        register_hypothesis_profiles()  # as the plugin does when --hypothesis-profile names one
        settings.load_profile("stateful-contract-thorough")
        assert run_profile(None) == "thorough"
        # Hypothesis derives profiles from the chosen one, e.g. for --hypothesis-verbosity.
        settings.register_profile("stateful-contract-dev-with-verbose-verbosity",
                                  parent=settings.get_profile("stateful-contract-dev"))
        settings.load_profile("stateful-contract-dev-with-verbose-verbosity")
        assert run_profile(None) == "dev"
        monkeypatch.setenv(PROFILE_ENV, "ci")  # a loaded Hypothesis profile wins over the variable
        assert run_profile(None) == "dev"
    finally:
        settings.load_profile(before)  # the suite's own profile, not the last one loaded here


def test_clauses_for_follows_the_tiers() -> None:
    class Core(StatefulLoaderContract):
        pass

    class Strict(StatefulLoaderContract):
        strict = True

    assert class_options(Core).selected == [i.split("-")[0] for i in CORE_IDS]
    assert class_options(Strict).selected[-3:] == ["SC40", "SC41", "SC42"]


# A correct loader's search on 2 ranks through the mixin (36 s of the README suite's CPU): with the
# other whole searches of correct loaders, in `nox -s acceptance`.
@pytest.mark.acceptance
def test_world_size_runs_sc30_on_ranks_from_the_mixin(pytester: pytest.Pytester) -> None:
    """``world_size = 2`` on the class: the ranks import the class by file path and use its hook."""
    pytester.makepyfile(test_loader=downstream("reference_wrapper", "world_size = 2"))
    result = pytester.runpytest_subprocess("-k", "SC30 or SC01", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 passed*"])
    collected = pytester.runpytest_subprocess("--collect-only", "-q")
    collected.stdout.fnmatch_lines(["*test_clause[[]SC30-every-rank-resumes]*"])


def test_a_multi_rank_run_s_limit_and_kept_files_are_class_attributes_as_docs_pytest_md_names_them(
        tmp_path: Any) -> None:
    """``run_timeout`` and ``run_dir`` are `CheckOptions` fields like the others: docs/pytest.md named
    ``run_timeout`` among the mixin's limits while the class had no such attribute."""

    class Ranked(StatefulLoaderContract):
        world_size = 2
        run_timeout = 900.0
        run_dir = str(tmp_path)

    class Default(StatefulLoaderContract):
        pass

    assert (class_options(Ranked).run_timeout, class_options(Ranked).run_dir) == (900.0, str(tmp_path))
    assert (class_options(Default).run_timeout, class_options(Default).run_dir) == (None, None)
