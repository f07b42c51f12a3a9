"""The pytest face of the contract: one subclass, one hook, one test per clause.

    from stateful_contract.testing import StatefulLoaderContract

    class TestMyLoader(StatefulLoaderContract):
        def make_loader(self, config):
            base = config.stateful_dataloader()
            return MyWrapper(base, grad_acc_step=config.grad_acc_step)

pytest then collects ``test_clause[SC01-implements-protocol]``,
``test_clause[SC10-resume-continues-the-stream]``, ... The engine's `check` runs once per
class, on the clauses pytest selected (``-k SC10`` checks only SC10), and every test reads
the verdict of its clause from that one report: a failure shows the clause, the message
and a copy-paste reproduction; a declared expected failure is an xfail; a declared
expected failure that passes fails, so the list stays current.

Everything the suite needs (the fixture, the parametrization, the profile choice) lives
on the class, so nothing depends on the downstream repository's conftest. Only
`make_loader` and the documented class attributes are meant to be overridden; the
helpers are ``@final``.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, ClassVar, final

import pytest

from ._checking import DEFAULT_MEMORY_LIMIT, FactoryError, check
from ._engine.plans import Alignment
from ._engine.supervised import Isolation
from ._faces import speaking
from ._render import render_result
from ._target import factory_import_line
from .clauses import Clause
from .clauses.registry import lookup
from .config import ConfigSpace, LoaderConfig
from .options import CheckOptions, ExpectedFailures
from .protocol import StatefulLoader
from .pytest_plugin import LEGACY_PREFIX, MARKER, REPORTS, run_options, run_profile
from .report import ClauseResult, Report

__all__ = ["StatefulLoaderContract", "class_options", "judge"]

#: Hypothesis profiles registered by the plugin are named ``stateful-contract-<profile>``.
PROFILE_PREFIX = LEGACY_PREFIX


class StatefulLoaderContract:
    """Base class for a downstream test class; implement `make_loader`.

    Class attributes a subclass may set:

    - ``expected_failures``: ``{"SC17": "reason"}``, clauses this loader is known to fail.
      Strict: a declared failure that passes fails its test.
    - ``checkpoint_alignment``: ``None`` (checkpoints anywhere, the default),
      ``"window"`` (only at gradient-accumulation window boundaries) or an ``int`` n
      (only every n batches), for wrappers that are exact only there. Shown on the
      report and the badge.
    - ``config_space``: a `ConfigSpace` narrowed to what the loader supports, e.g.
      ``ConfigSpace(num_workers=(0,), grad_acc_step=(1, 4), dataset_size=(1, 12))``.
    - ``strict``: also run the strict tier (SC40, SC41), which `StatefulDataLoader` fails.
    - ``profile``: the engine profile (``"dev"``, ``"ci"``, ``"thorough"``) when the run
      does not choose one with ``--stateful-contract-profile <profile>``.
    - ``timeout``: seconds one example may take, ``None`` for the profile's.
    - ``isolation``: ``"supervised"`` (the default wherever ``os.fork`` exists: the loader
      runs in a child process, so a loader that segfaults, exits, hangs for good or eats
      memory fails the clause it was in, not the pytest run) or ``"in-process"`` (to step
      through the loader in a debugger).
    - ``memory_limit``: bytes the loader's processes may gain during one example
      (default 4 GiB; ``None``: no limit). Supervised runs only.

    - ``jobs``: parallel processes the check judges clauses in (default: every core, one
      under pytest-xdist, whose workers already share the cores).
    - ``exitfirst``: stop the check at the first failing clause (pytest's own ``-x`` does
      this for every class); the clauses not reached are skipped as not run.

    - ``world_size``: more than 1 runs the contract on that many ranks
      (torch.distributed, gloo) and adds the multi-rank clauses SC30 and SC31. Every rank imports
      this test module by its file path and calls ``make_loader`` on a fresh instance of
      this class, so the class must be importable at module level.
    """

    expected_failures: ClassVar[ExpectedFailures] = {}
    checkpoint_alignment: ClassVar[Alignment] = None
    config_space: ClassVar[ConfigSpace] = ConfigSpace()
    strict: ClassVar[bool] = False
    profile: ClassVar[str] = "ci"
    timeout: ClassVar[float | None] = None
    world_size: ClassVar[int] = 1
    isolation: ClassVar[Isolation | None] = None
    memory_limit: ClassVar[int | None] = DEFAULT_MEMORY_LIMIT
    jobs: ClassVar[int | None] = None
    exitfirst: ClassVar[bool] = False

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
        metafunc.parametrize(
            "clause_id",
            [pytest.param(cid, id=f"{cid}-{lookup(cid).name}", marks=marks) for cid in options.selected],
        )

    @final
    @pytest.fixture(scope="class")
    @classmethod
    def stateful_contract_report(cls, request: pytest.FixtureRequest) -> Report:
        """The engine's report for this class, computed once for all its clause tests."""
        if cls.make_loader is StatefulLoaderContract.make_loader:
            pytest.fail(f"{cls.__qualname__} must implement make_loader(self, config)", pytrace=False)
        # With several ranks, each rank process imports this class by file path and name
        # (load_target turns a class with make_loader into a fresh instance's hook).
        factory: Any = cls().make_loader
        # Reproductions get the loader from this class's hook, as the test does.
        factory_import = factory_import_line(factory)
        if cls.world_size > 1:
            factory = f"{sys.modules[cls.__module__].__file__}:{cls.__qualname__}"
        # The class's options, on the clauses pytest selected, with the run's own choices.
        options = class_options(cls).replace(**run_options(request.config)).replace(
            clauses=selected_clauses(request.session, cls))
        try:
            with speaking("pytest", cls.__qualname__):  # hints name the class's attributes, not CLI options
                report = check(factory, options, target=request.node.nodeid, factory_import=factory_import)
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


def class_options(cls: type[StatefulLoaderContract]) -> CheckOptions:
    """The `CheckOptions` the class's attributes declare (the run's choices are applied over them)."""
    options = _OPTIONS.get(cls)
    if options is None:
        with speaking("pytest", cls.__qualname__):  # a warning names the class's attribute
            options = CheckOptions(
                profile=cls.profile, strict=cls.strict, expected_failures=cls.expected_failures,
                checkpoint_alignment=cls.checkpoint_alignment, space=cls.config_space, world_size=cls.world_size,
                timeout=cls.timeout, isolation=cls.isolation, memory_limit=cls.memory_limit, jobs=cls.jobs,
                exitfirst=cls.exitfirst)
        _OPTIONS[cls] = options
    return options


def clauses_for(cls: type[StatefulLoaderContract]) -> list[Clause]:
    """The class's default selection: the strict tier on request, the multi-rank one on several ranks."""
    return [lookup(cid) for cid in class_options(cls).selected]


def selected_clauses(session: pytest.Session, cls: type) -> list[str]:
    """The clause IDs of this class's tests that survived selection (``-k``, ``--lf``, ...)."""
    ids: list[str] = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if getattr(item, "cls", None) is cls and callspec is not None and "clause_id" in callspec.params:
            ids.append(callspec.params["clause_id"])
    return ids


def engine_profile(default: str, config: pytest.Config | None = None) -> str:
    """The engine profile the run chooses (`stateful_contract.pytest_plugin.run_profile`), else ``default``.

    ``--stateful-contract-profile dev`` (or ``STATEFUL_CONTRACT_PROFILE``, or the ini key
    ``stateful_contract_profile``) chooses ``dev`` for every class and leaves the user's
    other Hypothesis tests alone; the deprecated ``--hypothesis-profile
    stateful-contract-dev`` still works.
    """
    return run_profile(config) or default


def failure_text(result: ClauseResult) -> str:
    """What a failing clause test prints: the rule, what happened, how to reproduce it."""
    return render_result(result)


def judge(result: ClauseResult) -> None:
    """Turn one `ClauseResult` into the pytest outcome of its test.

    Failures are raised with ``pytrace=False``: the message and the reproduction say
    everything, and a traceback into this module would only hide them.
    """
    if result.status == "passed":
        return
    if result.status == "expected-failure":
        pytest.xfail(f"{result.id} {result.name}: {result.expected_failure_reason or 'declared expected failure'}")
    if result.status in ("skipped", "not-judged"):
        pytest.skip(f"{result.id} {result.status}: {result.message or 'not run'}")
    pytest.fail(failure_text(result), pytrace=False)
