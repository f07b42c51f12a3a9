"""`check`: run the contract against a loader factory and return a `Report`.

The one place a run is put together (docs/architecture.md). Where only the keyword form of
``load_state_dict`` works, the clauses still run through it (docs/clauses.md, SC02).
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hypothesis import configuration

from ..clauses import CLAUSES
from ..config import LoaderConfig
from ..isolation.executors import PROBE_CONFIG, FactoryProblem, InProcess
from ..isolation.noise import ignore_set_vital
from ..isolation.supervised import Supervised, choose_isolation
from ..isolation.target import (
    consume_import_line,
    describe_factory,
    factory_import_line,
    load_consume,
    load_target,
)
from ..profiles import get_profile
from ..report.results import Report
from ..repro.consumption import drawn_through
from ..repro.guard import ctrl_c_kept, frozen, quick_worker_shutdown, sigint_ignored
from ..search.loop import Executor
from ..search.plans import SavePoints
from ..spellings import Hint
from .clause_loop import Progress, _Run
from .options import CheckKeywords, CheckOptions
from .resumed import Resumed

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["CheckInterrupted", "FactoryError", "Progress", "check", "no_hypothesis_files"]


#: Read by Hypothesis in a process that has not chosen a home yet: set while the
#: contract runs, for the processes it starts (the ranks of a multi-rank check).
STORAGE_ENV = "HYPOTHESIS_STORAGE_DIRECTORY"


class FactoryError(Exception):
    """The factory cannot build a loader at all (raises, returns a non-iterable, or returns one object twice)."""


class CheckInterrupted(KeyboardInterrupt):
    """The check was stopped (Ctrl-C); ``report`` is what it had judged by then, marked interrupted."""

    def __init__(self, report: Report) -> None:
        super().__init__("the check was interrupted")
        self.report = report


def check(
    factory: Callable[[LoaderConfig], Any] | str,
    options: CheckOptions | None = None,
    *,
    target: str | None = None,
    factory_import: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    replay: tuple[LoaderConfig, Any] | Resumed | None = None,
    **keywords: Unpack[CheckKeywords],
) -> Report:
    """Run the StatefulLoader contract against ``factory`` and return one record per clause.

    ``factory(config)`` must return a fresh loader on each call; it may also be given as a
    ``"module:factory"`` / ``"path/file.py:factory"`` string (required for ``world_size > 1``: every
    rank imports it by name).

    The options are a `CheckOptions` (``check(factory, options)``), its fields as keywords
    (``check(factory, profile="dev", clauses=["SC10"])``), or both (the keywords change those fields). A
    wrong value raises `OptionError` before anything runs; `CheckOptions` says what each field does.

    The other keywords are about this call: ``target`` labels the report, ``factory_import`` is the line a
    reproduction uses to get the factory (the faces pass theirs), ``progress`` is called as the check goes,
    and ``replay=(config, plan)`` runs that one example instead of searching (``replay=Resumed(...)``: the
    fresh-process half of the examples an earlier launch saved, docs/distributed.md's ``--phase resume``).

    Raises `FactoryError` when the factory cannot build a loader at all, and `CheckInterrupted` (a
    `KeyboardInterrupt`, with the partial report) on Ctrl-C.
    """
    opts = CheckOptions(**keywords) if options is None else options.replace(**keywords)
    prof = get_profile(opts.profile)
    spec = factory if isinstance(factory, str) else None
    if isinstance(factory, str):
        factory = load_target(factory)
    target = target or spec or describe_factory(factory)
    factory_import = factory_import or factory_import_line(factory, spec)
    consume = consume_spec = None
    if opts.consume is not None:  # the loaders as the trainer draws from them (repro/consumption.py)
        consume_spec = opts.consume if isinstance(opts.consume, str) else None
        consume = load_consume(opts.consume) if isinstance(opts.consume, str) else opts.consume
        factory = drawn_through(factory, consume)
        factory_import += "\n" + consume_import_line(consume, consume_spec)
    notes = [f"expected failure {unknown!r} names no clause" for unknown in opts.unknown_expected]
    notes += opts.declared_notes  # what the user declared of their trainer
    selected = opts.selected
    example_timeout = prof.timeout if opts.timeout is None else opts.timeout
    alignment, world_size = opts.checkpoint_alignment, opts.world_size
    executor: Executor
    make_executor: Callable[[], Executor] | None = None
    # The first loaders are built from the probe config moved into the declared space, as SC01-SC03's is, on
    # every rank too.
    probe_config = opts.space.fitted(PROBE_CONFIG)
    seed = opts.seed if replay is not None else prof.draw_seed(opts.seed)
    if world_size > 1:
        from ..isolation.ranks import rank_executor

        if spec is None or (consume is not None and consume_spec is None):
            raise TypeError("a multi-rank check needs the factory (and a declared consumption) as a "
                            "'module:function' or 'path/file.py:function' string: every rank process imports it by name")
        executor = rank_executor(spec, world_size=world_size, factory_import=factory_import, alignment=alignment,
                                 consume=consume_spec, probe_config=probe_config,
                                 timeout=example_timeout, profile=prof, clauses=len(selected), run_dir=opts.run_dir,
                                 run_timeout=opts.run_timeout, memory_limit=opts.memory_limit,
                                 carried=opts.carried(seed))  # what its rerun lines give again
    else:
        one_rank: Callable[[], Executor] = (
            functools.partial(Supervised, factory, factory_import, alignment, example_timeout, opts.memory_limit,
                              probe_config=probe_config)
            if choose_isolation(opts.isolation) == "supervised"
            else functools.partial(InProcess, factory, factory_import, alignment, example_timeout,
                                   probe_config=probe_config))
        executor, make_executor = one_rank(), one_rank
    if isinstance(executor, InProcess):
        notes.append("the loader ran in the checker's own process (isolation='in-process'): no memory limit, "
                     "and a crash or an uninterruptible hang would have ended the check")
    # A run given its seed keeps no failures and tries none it kept, as a seeded Hypothesis test (search/saved.py).
    # Those kept where the trainer saves anywhere are not tried where it declared it saves at fewer points (a
    # failure right after iter() is none for a trainer that never saves there): each has its own.
    saves = opts.save_points
    database_key = target if saves == SavePoints() else f"{target} {saves!r}"
    run = _Run(executor, opts, notes=notes, seed=seed, progress=progress, replay=replay, make_executor=make_executor,
               database_key=database_key if opts.seed is None else None)
    interrupted = False
    try:
        # The process-wide settings a run needs, restored afterwards: everything alive now (torch,
        # Hypothesis, the user's modules, what the steps import later) is left out of the collections
        # the engine runs before each worker loader; Hypothesis writes no .hypothesis/constants/
        # into the user's directory; torchdata's deprecation noise is ignored, nothing else.
        with frozen(), no_hypothesis_files(), quick_worker_shutdown(), ctrl_c_kept(), warnings.catch_warnings():
            ignore_set_vital()
            try:
                run.run()
            except BaseException:
                with sigint_ignored():  # a second Ctrl-C must not leave the loader's processes behind
                    executor.close()
                raise
            executor.close()
    except FactoryProblem as e:
        raise FactoryError(str(e)) from None
    except KeyboardInterrupt:
        interrupted = True
    notes.extend(getattr(executor, "notes", []))
    if interrupted:
        current = f" during {run.current.id}" if run.current is not None else ""
        notes.append(f"interrupted{current}: the clauses not judged by then are reported as not judged")
    report = Report(target=target, results=[run.report(c, interrupted) for c in CLAUSES], profile=prof.name,
                    strict=opts.strict or "SC40" in selected, world_size=executor.world_size, seed=seed,
                    num_workers=list(opts.space.num_workers),
                    checkpoint_alignment=None if alignment is None else str(alignment),
                    consume=None if consume is None else consume_spec or describe_factory(consume),
                    notes=notes, interrupted=interrupted, stopped_at=run.stopped_at,
                    endless=run.endless, trainer_shape=list(opts.trainer_shape), options=opts.carried(seed))
    left = [r.id for r in report.results if r.status == "not-judged" and r.id in selected]
    if interrupted and left:
        report.notes.append(f"to judge only the clauses left: {Hint('clauses', tuple(left))}")
    if run.stopped_at is not None:
        not_run = run.not_run()
        report.notes.append(f"stopped at the first failure, {run.stopped_at} ({Hint('exitfirst', True)}): "
                            f"{len(not_run)} clause{'s' if len(not_run) != 1 else ''} not run"
                            + (f" ({', '.join(not_run)}); to judge them: {Hint('clauses', tuple(not_run))}" if not_run else ""))
    if interrupted:
        raise CheckInterrupted(report)
    return report


def _current_home() -> Path | None:
    """The directory Hypothesis writes under now (``.hypothesis`` in the import directory by default); None
    where this Hypothesis no longer has the functions used here (`no_hypothesis_files` says what that costs)."""
    try:
        where = configuration.storage_directory(intent_to_write=False)  # type: ignore[call-arg,unused-ignore]
    except (AttributeError, TypeError):  # hypothesis.configuration is not public API: it may change
        return None
    if isinstance(where, Path):  # before Hypothesis 6.152.0, the home's Path itself
        return where
    home = getattr(where, "home_directory", None)
    return home if isinstance(home, Path) and callable(getattr(configuration, "set_hypothesis_home_dir", None)) else None


@functools.cache
def _warn_home_moved() -> None:
    import hypothesis

    warnings.warn(f"Hypothesis {hypothesis.__version__} has no hypothesis.configuration.storage_directory or "
                  "set_hypothesis_home_dir as stateful-contract uses them (Hypothesis 6.139 to 6.170 have): the check "
                  "runs on, but Hypothesis may write .hypothesis/constants/ into the working directory (only the "
                  "processes the check starts are sent elsewhere, by HYPOTHESIS_STORAGE_DIRECTORY)", stacklevel=4)


@contextlib.contextmanager
def no_hypothesis_files() -> Iterator[Path]:
    """Run the body, and the processes it starts, with Hypothesis' home in a temporary directory
    (yielded, deleted afterwards), restored afterwards so the user's own Hypothesis tests in the same
    process keep theirs. Not thread-safe: the home is a process-wide global of Hypothesis.

    With ``database=None`` Hypothesis (since 6.131.1) still caches the constants it takes from the
    source of every local module under its home, ``.hypothesis/constants/`` in the directory it was
    imported from (``constants_from_module``, reached from the first example drawn), and no setting
    turns that off. Nothing is lost: it rebuilds that cache from the sources when it is missing.
    """
    previous_home = _current_home()
    if previous_home is None:
        _warn_home_moved()
    previous_env = os.environ.get(STORAGE_ENV)
    prefix = "stateful-contract-hypothesis-"
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as tmp:
        home = Path(tmp) / ".hypothesis"
        if previous_home is not None:
            configuration.set_hypothesis_home_dir(home)
        os.environ[STORAGE_ENV] = str(home)
        try:
            yield home
        finally:
            if previous_home is not None:
                configuration.set_hypothesis_home_dir(previous_home)
            if previous_env is None:
                os.environ.pop(STORAGE_ENV, None)
            else:
                os.environ[STORAGE_ENV] = previous_env
