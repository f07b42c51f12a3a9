"""Executors: where the loader under test runs (`InProcess` here, `supervised.Supervised` in a child,
`ranks.Ranks` on every rank), each answering one `ExampleRun` per rank; a `Handler` runs their
commands where the loader lives."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast, get_args

from ..config import LoaderConfig
from ..repro import status, steps
from ..repro.consumption import loader_class
from ..repro.guard import LoaderHung, LoaderSlow, current_children, deadline, reap_children
from ..repro.impact import loud
from ..repro.outcome import Outcome, last_frame, outcome_of
from ..repro.recording import recording
from ..repro.steps import Factory, LoaderError, LoadForm
from ..search.example import ClauseLike, ExampleRun, LoadFormProbe, recorded_program, run_example
from ..search.plans import Alignment, RankLengths
from ..spellings import Face, Hint, current, speaking
from .leftovers import restore_tmpdir, use_tmpdir
from .workspace import loaders_tmpdir, workspace

__all__ = ["BUILDING", "FactoryProblem", "Handler", "InProcess", "OneProcess", "StartFailed"]


def asks_a_missing_process_group(error: BaseException) -> bool:
    """Whether ``error`` came from ``torch.distributed`` with no process group to ask (a frame of its own
    raised it, and none is initialized in this process)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return False
    trace, files = error.__traceback__, []
    while trace is not None:
        files.append(trace.tb_frame.f_code.co_filename.replace("\\", "/"))
        trace = trace.tb_next
    return any("/torch/distributed/" in name for name in files[-3:])


#: The variables a launcher (torchrun) sets for each rank, which a factory may read instead of the config's rank.
LAUNCHER_VARIABLES = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                                "MASTER_PORT"})


def reads_a_launcher_variable(error: BaseException) -> str | None:
    """The launcher's variable whose absence ``error`` is (``os.environ["RANK"]``'s KeyError), or None."""
    name = error.args[0] if isinstance(error, KeyError) and error.args else None
    return name if isinstance(name, str) and name in LAUNCHER_VARIABLES else None


class FactoryProblem(Exception):
    """The factory cannot build a loader at all; the message is one line for the user."""


class StartFailed(Exception):
    """Building the first loader hung, or took its process down: every clause fails with ``run``."""

    def __init__(self, run: ExampleRun) -> None:
        super().__init__(run.outcome.got if run.outcome else "")
        self.run = run


#: What a crash while building and probing the first loader is reported under: no clause.
BUILDING = cast(ClauseLike, SimpleNamespace(id="", heading=""))



#: What a factory raises whatever its config: a module, a name or an attribute of the code that is not there.
_NOT_THE_CONFIGS = (ImportError, NameError, SyntaxError)


#: The config a loader is first built from: 4 batches per epoch (the last one short),
#: shuffled with an explicit generator, two windows of 2 batches.
PROBE_CONFIG = LoaderConfig(dataset_size=7, batch_size=2, shuffle=True, generator="explicit", seed=1,
                            grad_acc_step=2)


@dataclass
class Handler:
    """Answers the engine's commands where the loader lives: ``handler(("lengths", clause, config))``, in
    `InProcess`, a supervised child (`interpreter.child_main`) or on a rank (`ranks.world.Handler`)."""

    factory: Factory
    factory_import: str
    alignment: Alignment = None
    timeout: float | None = None
    #: Where examples write their files (checkpoints); a supervised child's is shared by its sibling.
    workdir: Path | None = None
    rank: int = 0
    world_size: int = 1
    #: What its scenarios may ask of the other ranks (`example.World`).
    world: Any = None
    #: The processes alive before the loader ran: any other left after a command is a loader's worker.
    keep: set[int] = field(default_factory=current_children)
    #: The face the check runs from, where the handler was made: its messages' hints are spelled in its words
    #: in whichever process the handler answers (`spellings.Hint`).
    face: tuple[Face, str] = field(default_factory=current)
    #: The config the first loaders are built and probed from: `PROBE_CONFIG` moved into the space the check
    #: declares (`ConfigSpace.fitted`), as the structure clauses' fixed config is, so a loader built only
    #: for part of the space (worker processes, a whole micro-batch) is never refused outside it.
    probe_config: LoaderConfig = PROBE_CONFIG

    def __call__(self, command: tuple[Any, ...]) -> Any:
        # Not a mere forward: it speaks the check's face and reaps what the loader left behind.
        kind, *args = command
        try:
            with speaking(*self.face):
                return getattr(self, kind)(*args)
        finally:
            reap_children(self.keep)  # workers of a loader abandoned mid-epoch

    def config(self, config: LoaderConfig) -> LoaderConfig:
        return config  # a rank's handler puts its rank in

    def doing(self, text: str) -> None:
        status.command(text)

    def start(self) -> str | ExampleRun | None:
        """Why the factory cannot build a loader at all (a hang: the run that hung), or None. A factory that
        returns the same object twice is refused too: every clause resumes a *new* loader from a state."""
        self.doing("building a loader")
        config = self.config(self.probe_config)
        again: Any = None
        program = recorded_program(self.factory_import, self.factory, config)
        try:
            with recording(program), deadline(self.timeout):
                loader = steps.fresh(self.factory, config)
                if hasattr(loader, "__iter__"):
                    again = steps.fresh(self.factory, config)
        except LoaderError as e:
            variable = reads_a_launcher_variable(e.error)
            if variable is not None or asks_a_missing_process_group(e.error):
                # A trainer's builder often takes its rank from torch.distributed, or from torchrun's RANK, which
                # a one-rank check does not start or set: the hint about the config space below would send such
                # a user the wrong way.
                asks = (f"it reads {variable} from the environment, which torchrun sets and a check on one rank "
                        "does not" if variable is not None else
                        "it asks torch.distributed (dist.get_rank(), a DistributedSampler without rank=), whose "
                        "process group a check on one rank does not start")
                return (f"the factory raised {type(e.error).__name__}: {e.error} on {config.as_code()}: {asks}. "
                        "Build the loader from config.rank and "
                        f"config.world_size (0 and 1 here; a check on N ranks gives each rank its own), or check it "
                        f"on ranks: {Hint('world_size', 2)}")
            if isinstance(e.error, _NOT_THE_CONFIGS):
                # A module or name that is not there fails every config: the advice about the config would send
                # the user to narrow a space that is not the cause.
                return (f"the factory raised {type(e.error).__name__}: {e.error}{last_frame(e.error)}: it cannot "
                        "build a loader for any config; fix the import or name it needs (-v prints the traceback)")
            # Which config, and both ways out: a stranger's factory often asks what only some configs allow
            # (persistent_workers=True raises with num_workers=0).
            return (f"the factory raised {type(e.error).__name__}: {e.error} on {config.as_code()}, the config "
                    "the first loader is built from; a factory must build a loader for every config of the space "
                    "it is checked on: ask only what the config allows (persistent_workers or prefetch_factor only "
                    f"when config.num_workers > 0), or narrow the space to what the loader supports "
                    f"({Hint('space')})")
        except LoaderSlow as e:  # each call returned: no hang, but no loader to check within the timeout
            return (f"building two loaders from {config.as_code()} took longer than the example timeout "
                    f"({e.seconds:g} s), though each factory call returned: raise it ({Hint('timeout')})")
        except LoaderHung as e:
            return ExampleRun(self.rank, Outcome("failed", expected="factory(config) to return a loader",
                                                 got=f"factory(config) did not return: {e}", world_size=self.world_size,
                                                 rank=self.rank if self.world_size > 1 else None,
                                                 impact=loud("factory(config)", "hangs: the job stops")), final=True)
        if not hasattr(loader, "__iter__"):
            return (f"the factory returned {loader_class(loader).__name__} {loader!r:.80}, not a loader "
                    "(it is not iterable)")
        if again is loader:
            return (f"the factory returned the same {loader_class(loader).__name__} object on two calls; it must "
                    "build a new loader on every call (the contract resumes a fresh loader from a saved "
                    "state)")
        return None

    def probe(self) -> LoadFormProbe:
        """How ``load_state_dict`` takes a state: positionally, only by keyword, or not at all. Every clause
        loads in the form found here, so a keyword-only ``load_state_dict`` (SC02) hides no other bug."""
        self.doing("probing how load_state_dict takes a state")
        config = self.config(self.probe_config)
        errors: list[str] = []
        for form in get_args(LoadForm):
            program = recorded_program(self.factory_import, self.factory, config)
            try:
                with recording(program), deadline(self.timeout):
                    state = steps.state_of(steps.fresh(self.factory, config))
            except LoaderHung:  # no verdict on the load form: the clauses meet the hang and fail on it
                return LoadFormProbe("positional", "hung")
            except LoaderError as e:
                return LoadFormProbe("unusable", str(e))
            try:
                with recording(program), deadline(self.timeout):
                    steps.load(steps.fresh(self.factory, config), state, form)
                return LoadFormProbe(form)
            except LoaderError as e:
                errors.append(str(e))
            except LoaderSlow:  # each call returned: as a hang above, the clauses meet the slowness
                return LoadFormProbe("positional", "slow")
            except LoaderHung as e:
                outcome = outcome_of(e, heading="", rank=self.rank, world_size=self.world_size)
                return LoadFormProbe("unusable", f"load_state_dict did not return: {e}", ExampleRun(
                    self.rank, outcome, reproduction=program.source(config.as_code()), final=True))
        return LoadFormProbe("unusable", "; ".join(errors))

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        """The epoch lengths of the uninterrupted run, or the failed run when the loader cannot give it."""
        config = self.config(config)
        self.doing(f"{clause.id}: running the uninterrupted {config.as_code()}")
        program = recorded_program(self.factory_import, self.factory, config)
        try:
            with recording(program), deadline(self.timeout):
                return steps.uninterrupted(self.factory, config)[1]
        except (LoaderError, LoaderHung, steps.EndlessPass, steps.PassEnded) as e:
            outcome = outcome_of(e, heading=clause.heading, rank=self.rank,
                                 world_size=self.world_size)
            return ExampleRun(self.rank, outcome, reproduction=program.source(config.as_code()),
                              final=isinstance(e, (LoaderHung, steps.EndlessPass)),
                              endless=isinstance(e, steps.EndlessPass))

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any, load_form: LoadForm,
            by_rank: list[list[int]] | None = None) -> ExampleRun:
        # On several ranks: the lengths the plan was drawn from (the shortest over ranks) and this rank's own.
        lengths = None if by_rank is None else RankLengths(RankLengths.shortest(by_rank), by_rank[self.rank])
        config = self.config(config)
        self.doing(f"{clause.id}: example {config.as_code()}"
                   + (f", plan {plan!r}" if plan is not None else ""))
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        return run_example(clause, self.factory, config, plan, factory_import=self.factory_import,
                           load_form=load_form, alignment=self.alignment, timeout=self.timeout,
                           world=self.world, workdir=self.workdir, rank_lengths=lengths)


class OneProcess:
    """An executor of one process, `InProcess` or `Supervised`: each method one command to its `Handler`."""

    world_size = 1
    load_form: LoadForm = "positional"

    def _call(self, command: tuple[Any, ...], clause: ClauseLike = BUILDING) -> Any:
        raise NotImplementedError  # the handler's answer, or the failed run of ``clause`` if its process died

    def start(self) -> None:
        answer = self._call(("start",))
        if isinstance(answer, ExampleRun):
            raise StartFailed(answer)
        if answer is not None:
            raise FactoryProblem(answer)

    def probe(self) -> LoadFormProbe:
        answer = self._call(("probe",))
        if isinstance(answer, ExampleRun):
            assert answer.outcome is not None
            return LoadFormProbe("unusable", answer.outcome.got, answer)
        assert isinstance(answer, LoadFormProbe)
        return answer

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        return self._call(("lengths", clause, config), clause)  # type: ignore[no-any-return]

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        return [self._call(("run", clause, config, plan, self.load_form), clause)]

    def keep_worlds(self, world_sizes: Collection[int]) -> None:
        pass  # one process: no world of another size is ever left idle


class InProcess(OneProcess):
    """Runs the loader in this process: the fastest executor, and the one a debugger can follow."""

    fresh_processes = False  # every example runs in this process

    def __init__(self, factory: Factory, factory_import: str, alignment: Alignment = None,
                 timeout: float | None = None, *, probe_config: LoaderConfig = PROBE_CONFIG) -> None:
        self._handler = Handler(factory, factory_import, alignment, timeout, probe_config=probe_config)
        self._stack = contextlib.ExitStack()

    def start(self) -> None:
        # The loader's temporary files (its workers' pymp-* directories) in the checker's loaders' TMPDIR, as a
        # supervised child's (removed with the workspace, when this process ends: a worker of a loader still
        # referenced may yet use its socket there); this process's TMPDIR again once the check is done.
        self._stack.callback(restore_tmpdir, use_tmpdir(loaders_tmpdir()))
        self._stack.enter_context(steps.references_kept())
        self._handler.workdir = Path(self._stack.enter_context(tempfile.TemporaryDirectory(dir=workspace())))
        super().start()

    def _call(self, command: tuple[Any, ...], clause: ClauseLike = BUILDING) -> Any:
        return self._handler(command)

    def restart(self, phase: str, world_size: int | None = None) -> None:
        pass  # never asked for: there are no `fresh_processes` to go on in

    def close(self) -> None:
        self._stack.close()
