"""SC30 every-rank-resumes: each rank resumes its own stream, and together they lose nothing.

The three saves (``torch.save`` per rank, DCP with rank-unique keys, DCP with one shared key: F15), resumed in
the same processes, then in fresh ones: docs/distributed.md, "What SC30 checks".
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import pickle
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch

from ..config import LoaderConfig
from ..repro.compare import first_difference, sample_ids, stream_difference
from ..repro.endless import describe, stream_losses
from ..repro.exception_text import exception_text
from ..repro.guard import LoaderHung, LoaderSlow
from ..repro.impact import Impact, losses
from ..repro.multisets import window
from ..repro.recording import asserts, unrecorded
from ..repro.state_steps import load_checkpoint, save_checkpoint
from ..repro.steps import LoaderError, NotJudgeable, Position, WaitedForARank, checkpoint, uninterrupted
from ..search.example import Example, World
from ..search.plans import Checkpoint, checkpoint_plan, position_on_rank
from .rank_streams import RankResume, every_rank_resumed, example_folder
from .registry import LOAD, clause

__all__ = ["CheckpointLayout"]  # the clause registers itself (`clause`)

#: A layout the trainer declares it saves the loader's state in (`CheckOptions.checkpoint_layout`), so SC30
#: judges that one alone: ``"per-rank-files"``, each rank ``torch.save``s its own file (MindSpeed-MM).
CheckpointLayout = Literal["per-rank-files"]

VIA_FILE = "torch.save per rank"
VIA_DCP = "torch.distributed.checkpoint"
VIA_SHARED = "torch.distributed.checkpoint, one key shared by every rank"
#: What the shared-key mode accepts besides an exact resume.
SHARED_REFUSAL = (" (under one DCP key shared by every rank, where DCP gives every rank one copy: or "
                  "refuse a state that is not its rank's, with an exception naming the rank)")
_NAMES_A_RANK = re.compile(r"rank", re.IGNORECASE)
#: What gloo says when a collective's group timeout passed (a TCP read, a recv, a barrier).
_TIMED_OUT = re.compile(r"timed out|timeout", re.IGNORECASE)


@asserts("assert_same_stream")
def _own_stream(expected: list[Any], resumed: list[Any]) -> str | None:
    """Where this rank's resumed stream departs from its own uninterrupted one (judged over all ranks)."""
    return stream_difference(expected, resumed)


def _dcp_save(world: World, path: Path, tree: dict[str, Any]) -> None:
    """``torch.distributed.checkpoint.save(tree)`` (a collective)."""
    from torch.distributed.checkpoint.state_dict_saver import save

    with _given_up(world, "torch.distributed.checkpoint.save"):
        save(tree, checkpoint_id=str(path), process_group=world.collectives)


def _dcp_load(world: World, path: Path, key: str, template: Any) -> Any:
    """``torch.distributed.checkpoint.load({key: template})``, into a copy of the template (a collective)."""
    from torch.distributed.checkpoint.state_dict_loader import load

    wanted: dict[str, Any] = {key: copy.deepcopy(template)}
    with _given_up(world, "torch.distributed.checkpoint.load"):
        load(wanted, checkpoint_id=str(path), process_group=world.collectives)
    return wanted[key]


@contextlib.contextmanager
def _given_up(world: World, call: str) -> Iterator[None]:
    """A wait in ``call`` past this rank's example timeout (its alarm, run once the collective returned) with
    its loader quiet for most of the example, or one its group gave up (`World.steps_group`, in a launcher's
    world), is no verdict of this rank's: another rank was slower or left the example before joining, and that
    rank's run says why (`search.loop.judge_runs` puts its run first). A rank whose own loader answered late in
    the example (`LoaderSlow`) is the slow one, and says so."""
    waited = f"rank {world.rank} waited in {call} for another rank"
    try:
        yield
    except LoaderSlow:
        raise  # its loader answered in the later half of the example: this rank is the slow one
    except LoaderHung as e:  # its loader quiet for most of the example: it was waiting here, for another rank
        raise WaitedForARank(f"{waited} until its example timeout had passed ({e.seconds:g} s): another rank was "
                           "slower or left the example early; its own verdict says which") from None
    except Exception as e:
        if world.collectives is None or not _TIMED_OUT.search(str(e)):
            raise
        raise WaitedForARank(f"{waited} that did not join it, and gave up: {exception_text(e)}") from e


def _leaves(state: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(state, Mapping):
        return {prefix: state}
    return {path: leaf for k, v in state.items()
            for path, leaf in _leaves(v, f"{prefix}.{k}" if prefix else str(k)).items()}


def whose_state(loaded: Any, saved: Mapping[int, Any], rank: int) -> list[int]:
    """The other ranks whose saved values a state loaded from the shared key holds (empty: its own)."""
    leaves = {q: _leaves(s) for q, s in saved.items()}
    owners: set[int] = set()
    for path, value in _leaves(loaded).items():
        holders = {q for q, of_q in leaves.items()
                   if path in of_q and first_difference(of_q[path], value) is None}
        if rank not in holders:
            owners |= holders
    return sorted(owners)


def _resume_and_compare(example: Example, result: RankResume, state: Any, expected: list[Any],
                        *, refusable: bool = False) -> None:
    try:
        resumed = example.resumed(state, len(expected))
    except LoaderError as e:
        result.error = f"while resuming from the state ({result.via}): {e}"
        result.refused = refusable and bool(_NAMES_A_RANK.search(str(e.error)))
        return
    result.difference = _own_stream(expected, resumed)
    result.expected_ids, result.resumed_ids = sample_ids(expected, integers=True), sample_ids(resumed, integers=True)


def _read_and_resume(example: Example, result: RankResume, expected: list[Any], read: Callable[[], Any],
                     failed: str) -> Any:
    """The state ``read()`` returns, resumed and compared (None where it raised: ``failed`` says so)."""
    try:
        state = read()
    except NotJudgeable:
        raise
    except Exception as e:
        result.error = f"{failed}: {type(e).__name__}: {e}"
        return None
    _resume_and_compare(example, result, state, expected)
    return state


def _from_shared_key(example: Example, folder: Path, state: Any, expected: list[Any], via: str,
                     ) -> tuple[RankResume, int | None]:
    """Every rank loads the shared key (a collective, so also a rank whose own save failed) and resumes;
    also returns the rank whose whole state this rank was given instead of its own, if any."""
    world = example.world
    assert world is not None
    result = RankResume(world.rank, via=via)
    world.status("loading the state with torch.distributed.checkpoint (one shared key)")
    try:
        loaded = _dcp_load(world, folder / "dcp-shared", "dataloader", state if state is not None else {})
    except NotJudgeable:
        raise
    except Exception as e:
        result.error = f"torch.distributed.checkpoint.load failed: {type(e).__name__}: {e}"
        return result, None
    if state is None:
        result.error = "its own state could not be saved"
        return result, None
    with unrecorded():  # DCP cannot be replayed in one process: see `_replay_shared_key`
        _resume_and_compare(example, result, loaded, expected, refusable=True)
    if not result.exact:
        read = load_checkpoint.__wrapped__  # type: ignore[attr-defined]  # for the message: no step
        saved = {}
        for q in range(world.world_size):
            with contextlib.suppress(Exception):
                saved[q] = read(str(folder / f"rank{q}.pt"))
        owners = whose_state(loaded, saved, world.rank)
        if owners:
            names = " and ".join(f"rank {q}" for q in owners)
            result.loaded_from = (f"DCP gave it values saved by {names}: under a key every rank saves, it keeps "
                                  "one copy of each item; a trainer that saves one rank's loader state and loads "
                                  "it on every rank does the same")
            if not result.refused and len(owners) == 1 and whose_state(loaded, saved, owners[0]) == []:
                return result, owners[0]
            if not result.refused:  # no one rank's whole state: the lines above alone pass
                example.program.add(f"# Under one DCP key shared by every rank, DCP gave this rank a mix of its own "
                                    f"values and those of {names}: that needs real ranks (the command below).")
    return result, None


def _replay_shared_key(example: Example, other: int, position: Position, expected: list[Any]) -> None:
    """The shared-key failure in one process: this rank resumes from the state ``other`` saved. Recorded,
    so the reproduction ends with it; what DCP did across processes becomes one plain line."""
    example.program.add(f"# Under one DCP key shared by every rank, DCP gave this rank rank {other}'s state. "
                        "In one process:")
    config = replace(example.config, rank=other)
    drawn = example.drawn_plan.position if isinstance(example.drawn_plan, Checkpoint) else position
    with contextlib.suppress(LoaderError):
        if drawn.after_stop:  # the other rank took the step as its own epoch lengths make it
            _, lengths = uninterrupted(example.factory, config)
            position = position_on_rank(drawn, lengths)
        state = checkpoint(example.fresh(config=config), position)
        _own_stream(expected, example.resumed(state, len(expected)))


def endless_counts(failed: Sequence[RankResume]) -> tuple[Impact | None, list[str]]:
    """On an endless stream: each failing rank's samples lost and repeated over its horizon, counted as SC10
    counts one stream's (`endless.stream_losses`: a stream resumed ahead lost what it skipped), and their sum."""
    if any(r.error is not None or r.expected_ids is None or r.resumed_ids is None for r in failed):
        return None, []  # a rank that raised, or batches without sample ids: counted as on epochs
    counts = {r.rank: stream_losses(r.expected_ids or [], r.resumed_ids or []) for r in failed}
    lines = [f"rank {r.rank}: over the {len(r.expected_ids or [])} samples of its endless stream after the "
             f"checkpoint, lost {counts[r.rank][0]}, repeated {counts[r.rank][1]}" for r in failed]
    lost, repeated = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
    if not lost and not repeated:
        return None, lines  # the same samples, in another order or with other contents
    return losses(lost, repeated), lines


def _judge_every_save(values: Sequence[list[RankResume]], config: LoaderConfig, plan: Checkpoint, *,
                      fresh: bool = False) -> None:
    """Each save's resumes over all ranks, one verdict per save (``fresh``: in a fresh set of processes)."""
    ranks = len(values)
    where = f"in a fresh set of {ranks} processes" if fresh else "in the same processes"
    at = describe(plan.position, config) if config.endless else plan.position.describe()
    for results in zip(*values):  # one save at a time, over all ranks
        shared = results[0].via.startswith(VIA_SHARED)
        every_rank_resumed(results, clause_id="SC30", refusal=SHARED_REFUSAL if shared else "", context=(
            f"every rank checkpointed {at} (the same step on all {ranks} ranks), saved with "
            f"{results[0].via.split(', resumed')[0]}, and resumed {where}"),
            counted=endless_counts if config.endless else None)


def resume_in_fresh_processes(example: Example, plan: Checkpoint, *,
                              checkpoint_layout: CheckpointLayout | None = None) -> list[RankResume]:
    """SC30's second half: each saved example resumed by a fresh set of processes, from all three saves
    (from the rank's own file alone where the trainer declared per-rank files)."""
    world = example.world
    assert world is not None
    folder = example_folder(example, "SC30")
    rank = world.rank
    expected, (consumed, epochs) = torch.load(folder / f"first-run-rank{rank}.pt", weights_only=False)
    from_file = RankResume(rank, via=f"{VIA_FILE}, resumed in a fresh process")
    own = _read_and_resume(example, from_file, expected,
                           lambda: load_checkpoint(str(folder / f"rank{rank}.pt")),
                           f"torch.load(weights_only=True) of rank{rank}.pt failed")
    from_file.consumed_ids, from_file.epochs = consumed, epochs  # to count the padding epoch by epoch
    if checkpoint_layout == "per-rank-files":
        return [from_file]
    from_dcp = RankResume(rank, via=f"{VIA_DCP}, resumed in a fresh process")
    world.status("loading the state with torch.distributed.checkpoint")
    _read_and_resume(example, from_dcp, expected, lambda: _rank_key_state(world, folder, rank),
                     "torch.distributed.checkpoint.load failed")
    from_shared, other = _from_shared_key(example, folder, own, expected,
                                          f"{VIA_SHARED}, resumed in a fresh process")
    if other is not None:
        _replay_shared_key(example, other, position_on_rank(plan.position, example.reference()[1]), expected)
    for r in (from_file, from_dcp, from_shared):  # to count the padding epoch by epoch
        r.consumed_ids, r.epochs = consumed, epochs
    return [from_file, from_dcp, from_shared]


def _rank_key_state(world: World, folder: Path, rank: int) -> Any:
    """This rank's state, from its own DCP key (a collective: every rank loads)."""
    payload = _dcp_load(world, folder / "dcp", "train_dataloader", {f"rank_{rank}": b""})[f"rank_{rank}"]
    return pickle.loads(payload.getvalue() if isinstance(payload, io.BytesIO) else payload)


@clause("SC30", "every-rank-resumes", tier="distributed", kills=4, cost=25, plan=checkpoint_plan, needs=("SC01", LOAD),
        world=_judge_every_save, reads=("checkpoint_layout",),
        after_restart=(resume_in_fresh_processes, functools.partial(_judge_every_save, fresh=True)))
def every_rank_resumes(example: Example, plan: Checkpoint, *,
                       checkpoint_layout: CheckpointLayout | None = None) -> list[RankResume]:
    """Each rank's loader resumes its own stream exactly from its own saved state, and over all ranks
    the resumed streams cover exactly the samples the uninterrupted run would have covered: none
    lost, none repeated; saved per rank with `torch.save`, through DCP with per-rank keys, and through
    DCP with one shared key (as `dcp.save({"dataloader": loader})` does), which exposes rank-blind state;
    only per rank with `torch.save` where the trainer declares it saves so."""
    world = example.world
    assert world is not None, "SC30 runs on the ranks of a multi-rank executor only"
    folder = example_folder(example, "SC30")
    result = RankResume(world.rank, via=f"{VIA_FILE}, resumed in the saving process")
    reference, lengths = example.reference()
    position = position_on_rank(plan.position, lengths)
    expected = example.expected_after(position)
    # An endless stream has no epochs to count padding in: its samples are counted over its horizon.
    consumed, epochs = (None, None) if example.config.endless else window(reference, lengths, position)
    payload, state = b"", None
    path = str(folder / f"rank{world.rank}.pt")
    example.program.bind(path, repr(Path(path).name))  # the reproduction saves beside itself
    try:
        state = checkpoint(example.fresh(), position)
        save_checkpoint(state, path)
        # What the fresh half compares with, and the epochs its padding is counted over.
        torch.save((expected, (consumed, epochs)), folder / f"first-run-rank{world.rank}.pt")
        payload = pickle.dumps(state)
    except LoaderError as e:
        result.error = f"while checkpointing {position.describe()}: {e}"
    except Exception as e:
        result.error = f"saving the state failed: torch.save/pickle raised {type(e).__name__}: {e}"
    if result.error is not None:
        state = None
    if checkpoint_layout == "per-rank-files":  # the trainer's own layout alone: no DCP save to meet
        if result.error is None:
            _read_and_resume(example, result, expected, lambda: load_checkpoint(path),
                             "torch.load(weights_only=True) cannot read the saved state back")
        result.consumed_ids, result.epochs = consumed, epochs
        return [result]
    # Collectives: every rank saves, even one whose loader failed (with an empty payload).
    world.status("saving the state with torch.distributed.checkpoint")
    _dcp_save(world, folder / "dcp", {"train_dataloader": {f"rank_{world.rank}": payload}})
    world.status("saving the state with torch.distributed.checkpoint (one shared key)")
    try:
        _dcp_save(world, folder / "dcp-shared", {"dataloader": state if state is not None else {}})
    except NotJudgeable:
        raise
    except Exception as e:  # DCP raises on every rank alike (it gathers the errors): none loads
        from_shared = RankResume(world.rank, via=f"{VIA_SHARED}, resumed in the saving process",
                                 error=f"torch.distributed.checkpoint.save failed: {type(e).__name__}: {e}")
        other = None
    else:
        from_shared, other = _from_shared_key(example, folder, state, expected,
                                              f"{VIA_SHARED}, resumed in the saving process")
    if result.error is None:
        _read_and_resume(example, result, expected, lambda: load_checkpoint(path),
                         "torch.load(weights_only=True) cannot read the saved state back")
    if other is not None:
        _replay_shared_key(example, other, position, expected)
    for r in (result, from_shared):  # to count the padding epoch by epoch
        r.consumed_ids, r.epochs = consumed, epochs
    return [result, from_shared]
