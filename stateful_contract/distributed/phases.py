"""What the ranks do: SC30's two phases and the per-rank core clauses.

Phase ``save`` (one set of processes): rank 0 runs Hypothesis and leads the others
through each drawn example (`stateful_contract.distributed.world`). An example is a
config and one checkpoint point, the same on every rank (trainers checkpoint all ranks
at the same global step). Every rank builds its loader from the config with its own
``rank``/``world_size``, records its uninterrupted stream, runs a second loader to the
checkpoint and saves that loader's state the two ways trainers do:

- ``torch.save({"extra_state": {"train_dataloader": state}}, "rank{r}.pt")``, one file
  per rank (MindSpeed-MM's ``extra_state``);
- ``torch.distributed.checkpoint.save`` of ``{"train_dataloader": {"rank_{r}": pickled
  state}}``: rank-unique keys, as torchtitan saves its loaders. Measured on torch 2.13:
  with one shared key, DCP keeps one rank's value (it deduplicates "replicated" items)
  and every rank loads that one, silently.

It then resumes in-process from the file it wrote, so a loader that is wrong even
there fails at once and Hypothesis shrinks the example. Afterwards every rank runs the
core clauses with its own rank in the config (`stateful_contract.check`).

Phase ``resume`` (a fresh set of processes, started only when phase ``save`` passed):
every rank reads back each example's ``rank{r}.pt`` and the DCP checkpoint, resumes a
new loader from each and compares with the stream phase ``save`` recorded. This is
where a state that only means something inside the process that produced it fails.
"""

from __future__ import annotations

import dataclasses
import io
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from ..clauses.violation import ClauseViolation
from ..config import ConfigSpace, LoaderConfig
from ..engine.compare import stream_difference
from ..engine.guard import LoaderHung, deadline
from ..engine.plans import REFERENCE_EPOCHS, Alignment, draw_position
from ..engine.scenarios import RESUME_EPOCHS
from ..engine.steps import (
    LoaderError,
    LoadForm,
    Position,
    checkpoint,
    epoch_lengths,
    fresh,
    load,
    state_of,
    take,
)
from ..profiles import get_profile, hypothesis_settings
from ..target import import_line, load_target
from .every_rank import RankResume, every_rank_resumes, sample_ids
from .world import World

__all__ = ["CheckSpec", "Example", "SaveOutcome", "Sc30Outcome", "run_phase", "trainer_file_state"]

SPEC_FILE = "check.pkl"
SAVE_OUTCOME = "save-outcome.pkl"
RESUME_OUTCOME = "resume-outcome.pkl"
LENGTHS_FILE = "lengths.pkl"
#: Where a state goes in a trainer's per-rank checkpoint file (MindSpeed-MM's layout).
TRAINER_KEYS = ("extra_state", "train_dataloader")
VIA_FILE = "torch.save per rank"
VIA_DCP = "torch.distributed.checkpoint"


@dataclass
class CheckSpec:
    """What the parent asks of the ranks (pickled into the run directory)."""

    target: str
    world_size: int
    profile: str
    sc30: bool
    core: list[str]
    expected_failures: dict[str, str]
    alignment: Alignment
    timeout: float
    replay: tuple[LoaderConfig, Position] | None = None
    space: ConfigSpace = field(default_factory=ConfigSpace)

    def rank_space(self, rank: int) -> RankSpace:
        """The configuration space, with configs carrying ``rank`` and this run's world size."""
        return RankSpace(**dataclasses.asdict(self.space), rank=rank, world_size=self.world_size)


@dataclass(frozen=True)
class Example:
    """One SC30 example: every rank checkpoints the config's loader at ``position``."""

    id: int
    config: LoaderConfig
    position: Position


@dataclass
class Sc30Outcome:
    status: str
    message: str = ""
    reproduction: str = ""
    examples: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass
class SaveOutcome:
    """Rank 0's summary of phase ``save``."""

    sc30: Sc30Outcome | None = None
    examples: list[Example] = field(default_factory=list)
    #: Each rank's `stateful_contract.report.Report` for the core clauses, by rank (or
    #: why `stateful_contract.check` could not run there).
    core: list[Any] | None = None
    load_form: LoadForm = "positional"


@dataclass(frozen=True)
class RankSpace(ConfigSpace):
    """A `ConfigSpace` whose configs carry this rank's ``rank`` and ``world_size``."""

    rank: int = 0
    world_size: int = 1

    def configs(self, *, workers: bool, rank: int | None = None,
                world_size: int | None = None) -> st.SearchStrategy[LoaderConfig]:
        return super().configs(workers=workers, rank=self.rank if rank is None else rank,
                               world_size=self.world_size if world_size is None else world_size)


# --- commands rank 0 sends -----------------------------------------------------------


@dataclass(frozen=True)
class _Probe:
    """Which form of ``load_state_dict`` works (SC02 decides the same for the core clauses)."""


@dataclass(frozen=True)
class _Reference:
    config: LoaderConfig


@dataclass(frozen=True)
class _Checkpoint:
    example: Example
    load_form: LoadForm


@dataclass(frozen=True)
class _Resume:
    example: Example
    load_form: LoadForm


@dataclass(frozen=True)
class _Core:
    pass


class _RankHung(BaseException):
    """A rank's example ran past its timeout: end the search at once (no shrinking)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def trainer_file_state(path: str | Path) -> Any:
    """The loader state in a per-rank trainer checkpoint file, read as checkpoint loaders do."""
    saved = torch.load(path, weights_only=True)
    return saved[TRAINER_KEYS[0]][TRAINER_KEYS[1]]


def _save_trainer_file(path: Path, state: Any) -> None:
    torch.save({TRAINER_KEYS[0]: {TRAINER_KEYS[1]: state}}, path)


def _dcp_save(path: Path, rank: int, payload: bytes) -> None:
    dcp_save({"train_dataloader": {f"rank_{rank}": payload}}, checkpoint_id=str(path))


def _dcp_load(path: Path, rank: int) -> bytes:
    wanted: dict[str, Any] = {"train_dataloader": {f"rank_{rank}": b""}}
    dcp_load(wanted, checkpoint_id=str(path))
    payload = wanted["train_dataloader"][f"rank_{rank}"]
    if isinstance(payload, io.BytesIO):
        payload = payload.getvalue()
    assert isinstance(payload, bytes)
    return payload


def _expected_bounds(lengths: list[int], position: Position) -> tuple[int, int]:
    """The uninterrupted stream from the checkpoint to the end of two further epochs."""
    return position.absolute(lengths), sum(lengths[: position.epoch + 3])


def _rank_position(position: Position, lengths: list[int]) -> Position:
    """The common checkpoint point as this rank takes it.

    Ranks end an epoch at different lengths only if the loader is uneven across ranks;
    an "after StopIteration" point exists only where this rank's epoch did end.
    """
    return replace(position, after_stop=position.after_stop and lengths[position.epoch] == position.batches)


#: The config the load form is probed with (as the structure clauses' config: two windows).
PROBE_CONFIG = LoaderConfig(dataset_size=7, batch_size=2, grad_acc_step=2)


class _Rank:
    """One rank's side of the check: runs the commands, keeps its reference streams."""

    def __init__(self, world: World, spec: CheckSpec) -> None:
        self.world = world
        self.spec = spec
        self.factory = load_target(spec.target)
        self.load_form: LoadForm = "positional"
        self.references: dict[LoaderConfig, tuple[list[Any], list[int]]] = {}

    # -- helpers

    def config(self, config: LoaderConfig) -> LoaderConfig:
        return replace(config, rank=self.world.rank, world_size=self.world.world_size)

    def example_dir(self, example: Example) -> Path:
        path = self.world.run_dir / "examples" / f"{example.id:04d}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def reference(self, config: LoaderConfig) -> tuple[list[Any], list[int]]:
        """This rank's uninterrupted stream and epoch lengths (kept for the current example only)."""
        if config not in self.references:
            self.references = {config: epoch_lengths(fresh(self.factory, config), REFERENCE_EPOCHS)}
        return self.references[config]

    def guarded(self, result: RankResume, doing: str, work: Callable[[], Any]) -> Any:
        """Run loader code under the example timeout; failures go into ``result``."""
        self.world.status(doing)
        try:
            with deadline(self.spec.timeout):
                return work()
        except LoaderHung as e:
            result.hung = True
            result.error = f"hung while {doing}: {e}"
        except LoaderError as e:
            result.error = f"while {doing}: {e}"
        except Exception as e:
            result.error = f"while {doing}: {type(e).__name__}: {e}"
        return None

    def resume_and_compare(self, result: RankResume, config: LoaderConfig, state: Any,
                           expected: list[Any]) -> None:
        resumed = self.guarded(result, f"resuming from the state ({result.via})", lambda: take(
            fresh(self.factory, config, state=state, load_form=self.load_form), len(expected),
            max_epochs=RESUME_EPOCHS))
        if resumed is not None:
            result.difference = stream_difference(expected, resumed)
            result.expected_ids, result.resumed_ids = sample_ids(expected), sample_ids(resumed)
            result.expected_batches = len(expected)

    # -- commands

    def handle(self, command: Any) -> Any:
        if isinstance(command, _Probe):
            return self.probe()
        if isinstance(command, _Reference):
            return self.lengths(command.config)
        if isinstance(command, _Checkpoint):
            self.load_form = command.load_form
            return self.checkpoint(command.example)
        if isinstance(command, _Resume):
            self.load_form = command.load_form
            return self.resume(command.example)
        if isinstance(command, _Core):
            return self.core()
        raise TypeError(f"unknown command {command!r}")

    def probe(self) -> str | RankResume:
        """``"positional"``, ``"keyword"`` or ``"unusable: ..."``; a `RankResume` if no state can be taken."""
        result = RankResume(self.world.rank)
        config = self.config(PROBE_CONFIG)
        state = self.guarded(result, "building a loader and taking its state_dict()",
                             lambda: state_of(fresh(self.factory, config)))
        if result.error is not None:
            return result
        errors = []
        forms: tuple[LoadForm, ...] = ("positional", "keyword")
        for form in forms:
            self.world.status(f"probing load_state_dict(state) ({form})")
            try:
                with deadline(self.spec.timeout):
                    load(fresh(self.factory, config), state, form)
                return form
            except (LoaderError, LoaderHung) as e:
                errors.append(str(e))
        return "unusable: " + "; ".join(errors)

    def lengths(self, config: LoaderConfig) -> list[int] | RankResume:
        result = RankResume(self.world.rank)
        config = self.config(config)
        got = self.guarded(result, f"running the uninterrupted {config.as_code()}",
                           lambda: self.reference(config))
        return result if got is None else list(got[1])

    def checkpoint(self, example: Example) -> RankResume:
        config = self.config(example.config)
        folder = self.example_dir(example)
        result = RankResume(self.world.rank, via=f"{VIA_FILE}, resumed in the saving process")
        reference, lengths = self.references[config]
        position = _rank_position(example.position, lengths)
        start, end = _expected_bounds(lengths, position)
        expected = reference[start:end]
        payload = b""
        state = self.guarded(result, f"checkpointing {position.describe()}",
                             lambda: checkpoint(fresh(self.factory, config), position))
        if result.error is None:
            try:
                _save_trainer_file(folder / f"rank{self.world.rank}.pt", state)
                torch.save(expected, folder / f"expected-rank{self.world.rank}.pt")
                payload = pickle.dumps(state)
            except Exception as e:
                result.error = f"saving the state failed: torch.save/pickle raised {type(e).__name__}: {e}"
        # A collective: every rank saves, even one whose loader failed (with an empty payload).
        self.world.status(f"saving example {example.id} with torch.distributed.checkpoint")
        _dcp_save(folder / "dcp", self.world.rank, payload)
        if result.error is None:
            try:
                state = trainer_file_state(folder / f"rank{self.world.rank}.pt")
            except Exception as e:
                result.error = (f"torch.load(weights_only=True) cannot read the saved state back: "
                                f"{type(e).__name__}: {e}")
            else:
                self.resume_and_compare(result, config, state, expected)
        return result

    def resume(self, example: Example) -> list[RankResume]:
        config = self.config(example.config)
        folder = self.example_dir(example)
        rank = self.world.rank
        expected = torch.load(folder / f"expected-rank{rank}.pt", weights_only=False)
        from_file = RankResume(rank, via=f"{VIA_FILE}, resumed in a fresh process")
        try:
            state = trainer_file_state(folder / f"rank{rank}.pt")
        except Exception as e:
            from_file.error = f"torch.load(weights_only=True) of rank{rank}.pt failed: {type(e).__name__}: {e}"
        else:
            self.resume_and_compare(from_file, config, state, expected)
        from_dcp = RankResume(rank, via=f"{VIA_DCP}, resumed in a fresh process")
        self.world.status(f"loading example {example.id} with torch.distributed.checkpoint")
        try:
            payload = _dcp_load(folder / "dcp", rank)  # a collective: every rank loads
            state = pickle.loads(payload)
        except Exception as e:
            from_dcp.error = f"torch.distributed.checkpoint.load failed: {type(e).__name__}: {e}"
        else:
            self.resume_and_compare(from_dcp, config, state, expected)
        return [from_file, from_dcp]

    def core(self) -> Any:
        from ..checking import check

        self.world.status(f"running the core clauses {', '.join(self.spec.core)}")
        space = self.spec.rank_space(self.world.rank)
        try:
            return check(self.factory, profile=self.spec.profile, clauses=self.spec.core,
                         expected_failures=self.spec.expected_failures,
                         checkpoint_alignment=self.spec.alignment, space=space,
                         timeout=self.spec.timeout, target=self.spec.target)
        except Exception as e:  # e.g. FactoryError: the factory cannot build a loader at all
            return f"{type(e).__name__}: {e}"


# --- rank 0: the search ------------------------------------------------------------------


def reproduction(spec: CheckSpec, example: Example, rank: int, lengths: list[int] | None, *,
                 load_form: str, fresh_processes: bool = False) -> str:
    """A few lines replaying one rank's resume, and the command replaying it on real ranks."""
    config = replace(example.config, rank=rank, world_size=spec.world_size)
    base = replace(example.config, rank=0, world_size=1)
    command = (f"python -m stateful_contract.distributed {spec.target} --world-size {spec.world_size} "
               f"--config \"{base.as_code()}\" --position \"{example.position.as_code()}\"")
    lines = [
        "import torch",
        "from stateful_contract.config import LoaderConfig",
        "from stateful_contract.engine.compare import assert_same_stream",
        "from stateful_contract.engine.steps import Position, checkpoint, epoch_lengths, fresh, take",
        import_line(spec.target),
        "",
        f"config = {config.as_code()}  # rank {rank} of {spec.world_size}",
        f"reference, lengths = epoch_lengths(fresh(factory, config), epochs={REFERENCE_EPOCHS})",
    ]
    if lengths is not None:
        position = _rank_position(example.position, lengths)
        start, end = _expected_bounds(lengths, position)
        load_arg = ", load_form='keyword'" if load_form == "keyword" else ""
        lines += [
            f"expected = reference[{start}:{end}]  # this rank's uninterrupted stream from the checkpoint on",
            f"state = checkpoint(fresh(factory, config), {position.as_code()})  # every rank at this step",
            f'torch.save({{"extra_state": {{"train_dataloader": state}}}}, "rank{rank}.pt")  # as trainers save it',
            f'state = torch.load("rank{rank}.pt", weights_only=True)["extra_state"]["train_dataloader"]',
            f"resumed = take(fresh(factory, config, state=state{load_arg}), len(expected), "
            f"max_epochs={RESUME_EPOCHS})",
            "assert_same_stream(expected, resumed)",
        ]
    if fresh_processes:
        head = ["# Fails only when the resume runs in a fresh set of processes: the lines below pass in",
                "# one process (the state depends on the process that took it). Replay on real ranks:",
                f"# {command}", ""]
        return "\n".join(head + lines)
    return "\n".join([*lines, "", "# The same example on real ranks (torch.distributed, gloo, fresh processes):",
                       f"# {command}"])


class _Leader:
    """Rank 0: draws the examples, sends them round, judges what comes back."""

    def __init__(self, rank: _Rank) -> None:
        self.rank = rank
        self.world = rank.world
        self.spec = rank.spec
        self.examples: list[Example] = []
        #: Each example's epoch lengths on every rank (for reproductions and phase ``resume``).
        self.lengths: dict[int, list[list[int]]] = {}
        #: The failing example, the first rank that failed it and that rank's epoch lengths.
        self.failure: tuple[Example, int, list[int] | None] | None = None

    def call(self, command: Any) -> list[Any]:
        return self.world.call(command, self.rank.handle)

    def judge_errors(self, gathered: list[Any], config: LoaderConfig, context: str) -> None:
        """Fail SC30 when some rank answered with an error instead of a value."""
        errors = [g for g in gathered if isinstance(g, RankResume)]
        if errors:
            self.failure = (Example(len(self.examples), config, Position()), errors[0].rank, None)
            self.judge([g if isinstance(g, RankResume) else RankResume(r) for r, g in enumerate(gathered)], context)

    def run_example(self, config: LoaderConfig, choose: Callable[[list[int]], Position]) -> None:
        """One example on every rank; raises `ClauseViolation` (or `_RankHung`) when SC30 fails."""
        gathered = self.call(_Reference(config))
        self.judge_errors(gathered, config, "running the uninterrupted loader on every rank")
        all_lengths = [list(g) for g in gathered]
        example = Example(len(self.examples), config, choose([min(e) for e in zip(*all_lengths, strict=True)]))
        self.examples.append(example)
        self.lengths[example.id] = all_lengths
        results = self.call(_Checkpoint(example, self.rank.load_form))
        self.judge(results, f"every rank checkpointed {example.position.describe()} (the same step on all "
                            f"{self.spec.world_size} ranks), saved with {VIA_FILE}, and resumed in the same "
                            "processes", example)

    def judge(self, results: Sequence[RankResume], context: str, example: Example | None = None) -> None:
        if example is not None:
            bad = next((r.rank for r in results if not r.exact), 0)
            self.failure = (example, bad, self.lengths[example.id][bad])
        try:
            every_rank_resumes(results, context=context)
        except ClauseViolation as v:
            if any(r.hung for r in results):
                raise _RankHung(v.message + "\n(the search stopped at this example: a hang is not shrunk)") from None
            raise
        self.failure = None

    def outcome(self, status: str, message: str = "", *, fresh_processes: bool = False) -> Sc30Outcome:
        repro = ""
        if self.failure is not None:
            example, rank, lengths = self.failure
            repro = reproduction(self.spec, example, rank, lengths, load_form=self.rank.load_form,
                                 fresh_processes=fresh_processes)
        return Sc30Outcome(status, message, repro, len(self.examples))

    def sc30(self) -> Sc30Outcome:
        """Phase ``save`` of SC30: how the loader takes a state, then the search."""
        probed = self.call(_Probe())
        try:
            self.judge_errors(probed, PROBE_CONFIG, "building a loader and taking its state_dict() on every rank")
        except (ClauseViolation, _RankHung) as e:
            return self.outcome("failed", str(e))
        if all(p == "positional" for p in probed):
            self.rank.load_form = "positional"
        elif all(p in ("positional", "keyword") for p in probed):
            self.rank.load_form = "keyword"
        else:
            bad = next(p for p in probed if p.startswith("unusable"))
            return Sc30Outcome("not-judged", "load_state_dict cannot be called with a state at all "
                               f"({bad.removeprefix('unusable: ')}); see SC02")
        outcome = self.search()
        if self.rank.load_form == "keyword":
            outcome.notes.append("load_state_dict(state) rejects a positional state (SC02); SC30 loaded "
                                 "through load_state_dict(state_dict=state)")
        return outcome

    def search(self) -> Sc30Outcome:
        """Hypothesis over configs and checkpoint points, or the one replayed example."""
        if self.spec.replay is not None:
            config, position = self.spec.replay
            try:
                self.run_example(config, lambda lengths: position)
            except (ClauseViolation, _RankHung) as e:
                return self.outcome("failed", str(e))
            return self.outcome("passed")
        profile = get_profile(self.spec.profile)
        space = self.spec.rank_space(0)
        for workers, budget in ((False, profile.examples), (True, profile.worker_examples)):
            strategy = space.configs(workers=workers)
            if strategy.is_empty or budget == 0:
                continue
            settings = hypothesis_settings(profile, workers=workers)

            @type(settings)(settings, max_examples=budget)
            @given(config=strategy, data=st.data())
            def example(config: LoaderConfig, data: st.DataObject) -> None:
                self.run_example(config, lambda lengths: draw_position(data, lengths, config, self.spec.alignment))

            try:
                example()
            except ClauseViolation as v:
                return self.outcome("failed", v.message)
            except _RankHung as h:
                return self.outcome("failed", h.message)
        return self.outcome("passed")

    def resume_all(self, examples: Sequence[Example]) -> Sc30Outcome:
        """Phase ``resume``: every saved example, from the per-rank files and from DCP."""
        self.examples = list(examples)
        for example in examples:
            gathered = self.call(_Resume(example, self.rank.load_form))
            for via in range(2):
                results = [per_rank[via] for per_rank in gathered]
                context = (f"every rank checkpointed {example.position.describe()} (the same step on all "
                           f"{self.spec.world_size} ranks); the state went through {results[0].via.split(',')[0]} "
                           f"and was resumed in a fresh set of {self.spec.world_size} processes")
                try:
                    self.judge(results, context, example)
                except (ClauseViolation, _RankHung) as e:
                    return self.outcome("failed", str(e), fresh_processes=True)
        return self.outcome("passed")


# --- the phases ---------------------------------------------------------------------------


def _write(path: Path, value: Any) -> None:
    path.write_bytes(pickle.dumps(value))


def _read(path: Path) -> Any:
    return pickle.loads(path.read_bytes())


def run_phase(world: World, phase: str) -> bool:
    """Entry of every rank (see `stateful_contract.distributed.launch`); rank 0 says whether to go on."""
    spec: CheckSpec = _read(world.run_dir / SPEC_FILE)
    rank = _Rank(world, spec)
    if not world.leads:
        world.follow(rank.handle)
        return False
    leader = _Leader(rank)
    try:
        if phase == "save":
            return _save_phase(leader)
        return _resume_phase(leader)
    except BaseException:
        world.status("rank 0 failed:\n" + traceback.format_exc())
        raise
    finally:
        world.stop()


def _save_phase(leader: _Leader) -> bool:
    spec = leader.spec
    outcome = SaveOutcome()
    if spec.sc30:
        started = time.perf_counter()
        outcome.sc30 = leader.sc30()
        outcome.examples = leader.examples
        outcome.load_form = leader.rank.load_form
        outcome.sc30.seconds = time.perf_counter() - started
        # Written now too, so that SC30's verdict survives a rank dying in the core clauses.
        _write(leader.world.run_dir / SAVE_OUTCOME, outcome)
    if spec.core:
        outcome.core = leader.call(_Core())
    _write(leader.world.run_dir / SAVE_OUTCOME, outcome)
    _write(leader.world.run_dir / LENGTHS_FILE, leader.lengths)
    return bool(outcome.sc30 is not None and outcome.sc30.status == "passed" and outcome.examples)


def _resume_phase(leader: _Leader) -> bool:
    run_dir = leader.world.run_dir
    saved: SaveOutcome = _read(run_dir / SAVE_OUTCOME)
    leader.lengths = _read(run_dir / LENGTHS_FILE)
    leader.rank.load_form = saved.load_form
    started = time.perf_counter()
    outcome = leader.resume_all(saved.examples)
    outcome.seconds = time.perf_counter() - started
    _write(run_dir / RESUME_OUTCOME, outcome)
    return True


def write_spec(run_dir: Path, spec: CheckSpec) -> None:
    _write(run_dir / SPEC_FILE, spec)


def read_outcomes(run_dir: Path) -> tuple[SaveOutcome | None, Sc30Outcome | None]:
    save = run_dir / SAVE_OUTCOME
    resume = run_dir / RESUME_OUTCOME
    return (_read(save) if save.is_file() else None, _read(resume) if resume.is_file() else None)
