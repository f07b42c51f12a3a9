"""`check`: run the contract against a loader factory and return a `Report`.

The one place a run is put together: it chooses the executor (this process for one
rank, torch.distributed ranks for several), runs each selected clause after the
clauses it needs (a clause whose prerequisite failed is reported as not judged,
saying which and why), applies the declared expected failures, and assembles the
report. When only the keyword form ``load_state_dict(state_dict=...)`` works (the
MindSpeed-MM wrapper's bug), the clauses still run through that form, so a single run
reveals every bug.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._engine.executors import Executor, FactoryProblem, InProcess
from ._engine.guard import quick_worker_shutdown, sigint_ignored
from ._engine.noise import ignore_set_vital
from ._engine.plans import Alignment
from ._engine.supervised import DEFAULT_MEMORY_LIMIT, Isolation, Supervised, choose_isolation
from ._faces import hint_clauses, hint_exitfirst, in_face
from ._run import Progress, _Run
from ._storage import no_hypothesis_files
from ._target import describe_factory, factory_import_line, import_line, load_target
from .clauses import CLAUSES
from .config import LoaderConfig
from .options import CheckKeywords, CheckOptions, OptionError, options_of
from .profiles import get_profile
from .report import Report

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DEFAULT_MEMORY_LIMIT", "CheckInterrupted", "CheckOptions", "FactoryError", "Isolation", "OptionError",
           "Progress", "check"]

class FactoryError(Exception):
    """The factory cannot build a loader at all (raises, returns a non-iterable, or returns one object twice)."""


class CheckInterrupted(KeyboardInterrupt):
    """The check was stopped (Ctrl-C); ``report`` is what it had judged by then, marked interrupted."""

    def __init__(self, report: Report) -> None:
        super().__init__("the check was interrupted")
        self.report = report


def _alignment_text(alignment: Alignment) -> str | None:
    if alignment is None:
        return None
    return "window" if alignment == "window" else str(int(alignment))


def _started(kind: type[Any], factory: Callable[[LoaderConfig], Any], factory_import: str, alignment: Alignment,
             timeout: float | None, memory_limit: int | None) -> Executor:
    """A started executor of ``kind`` for one rank: what each parallel job judges its clauses with."""
    executor: Executor = (Supervised(factory, factory_import, alignment, timeout, memory_limit) if kind is Supervised
                          else InProcess(factory, factory_import, alignment, timeout))
    executor.start()
    return executor


@contextlib.contextmanager
def _engine_quiet() -> Iterator[None]:
    """The process-wide settings a run needs, restored afterwards."""
    # Everything alive now (torch, Hypothesis, the user's modules) is left out of the
    # collections the engine runs before each worker loader: a full collection then
    # costs milliseconds instead of ~0.3 s.
    gc.freeze()
    try:
        # Hypothesis would write .hypothesis/constants/ into the user's directory.
        with no_hypothesis_files(), quick_worker_shutdown(), warnings.catch_warnings():
            ignore_set_vital()  # torchdata's deprecation noise, nothing else (`_engine.noise`)
            yield
    finally:
        gc.unfreeze()


def check(
    factory: Callable[[LoaderConfig], Any] | str,
    options: CheckOptions | None = None,
    *,
    target: str | None = None,
    factory_import: str | None = None,
    progress: Callable[[Progress], None] | None = None,
    replay: tuple[LoaderConfig, Any] | None = None,
    **keywords: Unpack[CheckKeywords],
) -> Report:
    """Run the StatefulLoader contract against ``factory`` and return one record per clause.

    ``factory(config)`` must return a fresh loader on each call; it may also be given
    as a ``"module:factory"`` / ``"path/file.py:factory"`` string (required for
    ``world_size > 1``: every rank imports it by name).

    The options are a `CheckOptions` (``check(factory, options)``), its fields as keywords
    (``check(factory, profile="dev", clauses=["SC10"])``), or both: the keywords change those
    fields of ``options``. A wrong value raises `OptionError` before anything runs. The
    options, in short (`CheckOptions` has each field):

    - ``expected_failures`` maps clause IDs to reasons: such a clause that fails is an
      expected failure, one that passes is reported as an unexpected pass (the list must
      stay current); an ID that names no clause is warned about once and noted on the report.
    - ``checkpoint_alignment="window"`` (or an int) declares that the loader is exact only
      at window boundaries: checkpoints are then drawn only there, and the report says so.
    - ``world_size=N`` runs every example on N ranks of torch.distributed (gloo) at once and
      adds the multi-rank clauses. ``seed`` seeds the search (recorded; `Profile.draw_seed`).
    - ``isolation="supervised"`` (the default where ``os.fork`` exists) runs the loader in a
      child process: a loader that kills its process (a segfault, ``os._exit``, the OOM
      killer), hangs where the ``timeout`` cannot interrupt it, or allocates more than
      ``memory_limit`` bytes during an example (default `DEFAULT_MEMORY_LIMIT`, 4 GiB; None:
      no limit) fails the clause it was running, and the check goes on in a fresh child.
      ``isolation="in-process"`` runs it in this process: a little faster, and what a
      debugger needs, but such a loader then takes the check down with it (and no memory
      limit applies). See docs/supervision.md.
    - ``jobs=N`` judges the searched clauses that no other clause needs in ``N`` parallel
      processes, each with an executor of its own (default: every core this process may run
      on, one under pytest-xdist; one rank only); the report notes the speed-up over one core.
      The verdicts do not depend on it.
    - ``exitfirst=True`` stops at the first clause that fails (the clauses likeliest to fail,
      and cheapest, run first: `Clause.priority`); the report names the clauses not run
      (``Report.stopped_at``, and each one "not judged" saying so).

    The other keywords are about this call: ``target`` labels the report, ``factory_import``
    is the line a reproduction uses to get the factory (the faces pass theirs),
    ``progress`` is called as the check goes, and ``replay=(config, plan)`` runs that one
    example instead of searching.

    Raises `FactoryError` when the factory cannot build a loader at all, and
    `CheckInterrupted` (a `KeyboardInterrupt`, with the partial report) on Ctrl-C.
    """
    opts = options_of(options, keywords)
    prof = get_profile(opts.profile)
    spec = factory if isinstance(factory, str) else None
    if isinstance(factory, str):
        target = target or factory
        factory = load_target(factory)
        if factory_import is None:
            factory_import = import_line(spec or "") + (
                "().make_loader" if getattr(factory, "__name__", "") == "make_loader" else "")
    target = target or describe_factory(factory)
    factory_import = factory_import or factory_import_line(factory)
    notes = [f"expected failure {unknown!r} names no clause" for unknown in opts.unknown_expected]
    selected = opts.selected
    example_timeout = prof.timeout if opts.timeout is None else opts.timeout
    alignment, world_size = opts.checkpoint_alignment, opts.world_size
    executor: Executor
    if world_size > 1:
        from ._engine.ranks import rank_executor

        if spec is None:
            raise TypeError("a multi-rank check needs the factory as a 'module:factory' or "
                            "'path/file.py:factory' string: every rank process imports it by name")
        executor = rank_executor(spec, world_size=world_size, factory_import=factory_import, alignment=alignment,
                                 timeout=example_timeout, profile=prof, clauses=len(selected), run_dir=opts.run_dir,
                                 run_timeout=opts.run_timeout, memory_limit=opts.memory_limit)
    elif choose_isolation(opts.isolation) == "supervised":
        executor = Supervised(factory, factory_import, alignment, example_timeout, opts.memory_limit)
    else:
        executor = InProcess(factory, factory_import, alignment, example_timeout)
    make_executor = None if world_size > 1 else functools.partial(
        _started, type(executor), factory, factory_import, alignment, example_timeout, opts.memory_limit)
    if isinstance(executor, InProcess):
        notes.append("the loader ran in the checker's own process (isolation='in-process'): no memory limit, "
                     "and a crash or an uninterruptible hang would have ended the check")
    seed = opts.seed if replay is not None else prof.draw_seed(opts.seed)
    run = _Run(executor, selected=selected, expected=dict(opts.expected_failures), profile=prof.name,
               space=opts.space, alignment=alignment, progress=progress, replay=replay, notes=notes, seed=seed,
               jobs=opts.jobs or 1, make_executor=make_executor, exitfirst=opts.exitfirst)
    interrupted = False
    try:
        with _engine_quiet():
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
                    strict=opts.strict or "SC40" in selected, world_size=world_size, seed=seed,
                    num_workers=list(opts.space.num_workers), checkpoint_alignment=_alignment_text(alignment),
                    notes=notes, interrupted=interrupted, stopped_at=run.stopped_at)
    left = [r.id for r in report.results if r.status == "not-judged" and r.id in selected]
    if interrupted and left:
        report.notes.append(f"to judge only the clauses left: {hint_clauses(*left)}")
    if run.stopped_at is not None:
        not_run = run.not_run()
        report.notes.append(f"stopped at the first failure, {run.stopped_at} ({hint_exitfirst()}): "
                            f"{len(not_run)} clause{'s' if len(not_run) != 1 else ''} not run"
                            + (f" ({', '.join(not_run)}); to judge them: {hint_clauses(*not_run)}" if not_run else ""))
    for r in report.results:  # every hint in the words of the face the check runs from
        r.message, r.got, r.expected, r.context = map(in_face, (r.message, r.got, r.expected, r.context))
        r.notes = [in_face(n) for n in r.notes]
    report.notes = [in_face(n) for n in report.notes]
    if interrupted:
        raise CheckInterrupted(report)
    return report
