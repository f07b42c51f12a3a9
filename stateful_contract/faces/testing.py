"""The pytest face of the contract: one subclass, one hook, one test per clause (docs/pytest.md).

The engine's `check` runs once per class, on the clauses pytest selected, and every test
reads the verdict of its clause from that one report.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, final

import pytest

from ..clauses.distributed import CheckpointLayout
from ..clauses.registry import lookup
from ..config import ConfigSpace, LoaderConfig
from ..isolation.supervised import Isolation
from ..isolation.target import factory_import_line
from ..profiles import get_profile
from ..protocol import StatefulLoader
from ..report.render import render_result
from ..report.results import ClauseResult, Report
from ..run.check import FactoryError, check
from ..run.options import CheckOptions, ExpectedFailures
from ..search.plans import Alignment
from ..spellings import speaking
from .live import LOGGER, Live
from .pytest_plugin import MARKER, REPORTS, clause_tests, hypothesis_seed, run_options, xdist_jobs

__all__ = ["StatefulLoaderContract", "class_options", "judge"]


class StatefulLoaderContract:
    """Base class for a downstream test class; implement `make_loader`.

    The class attributes below are the fields of one `CheckOptions` (``config_space`` is its ``space``),
    with its defaults (docs/pytest.md); a run's own choices (``--stateful-contract-profile``,
    ``--stateful-contract-seed``, pytest's ``-x``) apply over them. With ``world_size`` > 1 every rank
    imports the class by file path and name, so it must be defined at module level.

    A trainer that draws its batches through a pipeline over the loader (a preloader) and saves the
    loader's state declares it with a method ``consume(self, loader)`` returning the iterator it draws
    from: the clauses then draw every batch through it and take each state from the loader.
    """

    expected_failures: ClassVar[ExpectedFailures] = {}
    checkpoint_alignment: ClassVar[Alignment] = CheckOptions.checkpoint_alignment
    epoch_hook: ClassVar[str] = CheckOptions.epoch_hook
    config_space: ClassVar[ConfigSpace] = ConfigSpace()
    strict: ClassVar[bool] = CheckOptions.strict
    profile: ClassVar[str] = CheckOptions.profile
    timeout: ClassVar[float | None] = CheckOptions.timeout
    world_size: ClassVar[int] = CheckOptions.world_size
    run_timeout: ClassVar[float | None] = CheckOptions.run_timeout
    run_dir: ClassVar[str | Path | None] = CheckOptions.run_dir
    isolation: ClassVar[Isolation | None] = CheckOptions.isolation
    memory_limit: ClassVar[int | None] = CheckOptions.memory_limit
    jobs: ClassVar[int | None] = CheckOptions.jobs
    exitfirst: ClassVar[bool] = CheckOptions.exitfirst
    fixed_global_batch: ClassVar[bool] = CheckOptions.fixed_global_batch
    joins_uneven_inputs: ClassVar[bool] = CheckOptions.joins_uneven_inputs
    checkpoint_layout: ClassVar[CheckpointLayout | None] = CheckOptions.checkpoint_layout
    trainer_shape: ClassVar[Sequence[str]] = CheckOptions.trainer_shape
    endless: ClassVar[bool] = CheckOptions.endless

    def make_loader(self, config: LoaderConfig) -> StatefulLoader:
        """The hook: return a fresh loader for ``config`` on every call.

        ``config.stateful_dataloader()`` is torchdata's loader for the config, the usual
        thing to wrap; ``config.grad_acc_step`` is the window size a wrapper buffers.
        """
        raise NotImplementedError(f"{type(self).__qualname__} must implement make_loader(self, config)")

    @final
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """One ``test_clause`` per clause this class runs, with the clause in the test id."""
        if "clause_id" not in metafunc.fixturenames:
            return
        cls = type(self)
        options = class_options(cls)  # built (and warned about) here, once
        # The marker is registered by the plugin; without it (-p no:stateful_contract)
        # an unregistered mark would break --strict-markers runs.
        marks = [getattr(pytest.mark, MARKER)] if metafunc.config.pluginmanager.has_plugin(MARKER) else []
        # pytest-timeout's global --timeout would end the first clause test, inside which the whole check runs
        # (every other test then errors): the contract's own limits apply (an example's timeout, the memory
        # limit, a multi-rank run's timeout). A timeout mark of the user's own, on the class or module, wins.
        if metafunc.config.pluginmanager.has_plugin("timeout") and metafunc.definition.get_closest_marker(
                "timeout") is None:
            marks.append(pytest.mark.timeout(0))
        metafunc.parametrize("clause_id", [pytest.param(cid, id=f"{cid}-{lookup(cid).name}", marks=marks)
                                           for cid in options.selected])

    @final
    @pytest.fixture(scope="class")
    @classmethod
    def stateful_contract_report(cls, request: pytest.FixtureRequest) -> Report:
        """The engine's report for this class, computed once for all its clause tests."""
        if cls.make_loader is StatefulLoaderContract.make_loader:
            pytest.fail(f"{cls.__qualname__} must implement make_loader(self, config)", pytrace=False)
        factory: Any = cls().make_loader
        factory_import = factory_import_line(factory)  # reproductions call the class's hook, as the test does
        if cls.world_size > 1:  # each rank imports the class by path (load_target: a fresh instance's hook)
            factory = f"{sys.modules[cls.__module__].__file__}:{cls.__qualname__}"
        # The class's options, on the clauses pytest selected, with the run's own choices.
        options = class_options(cls).replace(**run_options(request.config)).replace(
            clauses=list(clause_tests(request.session, cls)))
        if (seeded := hypothesis_seed(request.config)) is not None and options.seed is None and not get_profile(
                options.profile).derandomize:
            options = options.replace(seed=seeded)  # --hypothesis-seed, where Hypothesis would use it
        if cls.jobs is None and (shared := xdist_jobs(request.session)) is not None:
            options = options.replace(jobs=shared)  # the cores the other xdist workers leave idle
        consume = getattr(cls(), "consume", None)  # the hook naming how the trainer draws batches, if any
        if callable(consume):
            options = options.replace(consume=factory if isinstance(factory, str) else consume)
        try:
            # Progress to the log, not between pytest's own lines: live with --log-cli-level INFO (faces/live.py);
            # hints name the class's attributes, not CLI options.
            with Live(say=logging.getLogger(LOGGER).info) as live, speaking("pytest", cls.__qualname__):
                report = check(factory, options, target=request.node.nodeid, factory_import=factory_import,
                               progress=live)
        except FactoryError as e:
            # No loader at all: one clear line on every test, not a traceback into the engine.
            pytest.fail(f"{cls.__qualname__}.make_loader cannot build a loader: {e}", pytrace=False)
        request.config.stash.setdefault(REPORTS, {})[request.node.nodeid] = report
        return report

    @final
    def test_clause(self, clause_id: str, stateful_contract_report: Report) -> None:
        """The verdict on one clause (the test id names it)."""
        judge(stateful_contract_report[clause_id])


#: Each class's options, built once: an expected failure naming no clause is warned about once.
_OPTIONS: weakref.WeakKeyDictionary[type, CheckOptions] = weakref.WeakKeyDictionary()
_FIELDS = [f.name for f in dataclasses.fields(CheckOptions)]


def class_options(cls: type[StatefulLoaderContract]) -> CheckOptions:
    """The `CheckOptions` the class's attributes declare (the run's choices are applied over them)."""
    if cls not in _OPTIONS:
        with speaking("pytest", cls.__qualname__):  # a warning names the class's attribute
            # Each attribute the base class declares is the `CheckOptions` field of its name.
            declared = {name: getattr(cls, name) for name in _FIELDS if name in vars(StatefulLoaderContract)}
            _OPTIONS[cls] = CheckOptions(**declared, space=cls.config_space)
    return _OPTIONS[cls]


def judge(result: ClauseResult) -> None:
    """Turn one `ClauseResult` into the pytest outcome of its test. A failure is raised with ``pytrace=False``
    (its message and reproduction say everything; a traceback into this module would only hide them)."""
    if result.status == "passed":
        return
    if result.status == "expected-failure":
        pytest.xfail(f"{result.id} {result.name}: {result.expected_failure_reason or 'declared expected failure'}")
    if result.status in ("skipped", "not-judged"):
        pytest.skip(f"{result.id} {result.status}: {result.message or 'not run'}")
    pytest.fail(render_result(result), pytrace=False)
