"""SC30 every-rank-resumes: each rank resumes its own stream, and together they lose nothing.

Every rank checkpoints its own loader at the same step (trainers checkpoint all ranks
at the same global step) and saves the state the three ways trainers do:

- ``torch.save({"extra_state": {"train_dataloader": state}}, "rank{r}.pt")``, one file
  per rank (MindSpeed-MM's ``extra_state``);
- ``torch.distributed.checkpoint.save`` of ``{"train_dataloader": {"rank_{r}": pickled
  state}}``: rank-unique keys, as torchtitan saves its loaders;
- ``torch.distributed.checkpoint.save({"dataloader": state})``: one key shared by every
  rank, what ``dcp.save({"dataloader": loader})`` saves. Measured on torch 2.13: DCP
  treats every item of a key that all ranks save as replicated and keeps one copy of
  each, taken from whichever rank its load balancing picks (so even a mixture of
  ranks), and every rank loads that copy, silently. A loader whose per-rank states are
  the same at the same step (a position) resumes exactly; one whose state differs per
  rank must say so: key it by rank inside (``{"rank_1": ...}``, distinct keys for DCP)
  or refuse a state that is not its rank's with an exception naming the rank. One that
  silently resumes another rank's position fails (docs/distributed.md).

It resumes in the same processes from the file and from the shared key (a failure
there is shrunk), and once the search is over, in a fresh set of processes from all
three, where a state that only means something inside the process that took it fails.
"""

from __future__ import annotations

import copy
import io
import json
import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from .._engine.compare import stream_difference
from .._engine.example import Example
from .._engine.plans import Checkpoint, checkpoint_plan, expected_bounds, position_on_rank
from .._engine.recording import Program, asserts, recording
from .._engine.state_steps import TRAINER_KEYS, load_checkpoint, save_checkpoint
from .._engine.steps import LoaderError, Position, checkpoint, uninterrupted
from ..config import LoaderConfig
from .rank_streams import RankResume, every_rank_resumed, example_folder, sample_ids, window
from .registry import LOAD, clause

__all__ = ["RankResume", "every_rank_resumes", "sample_ids"]

VIA_FILE = "torch.save per rank"
VIA_DCP = "torch.distributed.checkpoint"
VIA_SHARED = "torch.distributed.checkpoint, one key shared by every rank"
#: What the shared-key mode accepts besides an exact resume.
SHARED_REFUSAL = (" (under one DCP key shared by every rank, where DCP gives every rank one copy: or "
                  "refuse a state that is not its rank's, with an exception naming the rank)")
_NAMES_A_RANK = re.compile(r"rank", re.IGNORECASE)


@asserts("assert_same_stream")
def _own_stream(expected: list[Any], resumed: list[Any]) -> str | None:
    """Where this rank's resumed stream departs from its own uninterrupted one (judged over all ranks)."""
    return stream_difference(expected, resumed)


def _dcp_save(path: Path, rank: int, payload: bytes) -> None:
    from torch.distributed.checkpoint.state_dict_saver import save

    save({"train_dataloader": {f"rank_{rank}": payload}}, checkpoint_id=str(path))


def _dcp_load(path: Path, rank: int) -> bytes:
    from torch.distributed.checkpoint.state_dict_loader import load

    wanted: dict[str, Any] = {"train_dataloader": {f"rank_{rank}": b""}}
    load(wanted, checkpoint_id=str(path))
    payload = wanted["train_dataloader"][f"rank_{rank}"]
    if isinstance(payload, io.BytesIO):
        payload = payload.getvalue()
    assert isinstance(payload, bytes)
    return payload


def _shared_save(path: Path, state: Any) -> None:
    """``dcp.save({"dataloader": state})``: the same key on every rank (a collective)."""
    from torch.distributed.checkpoint.state_dict_saver import save

    save({"dataloader": state}, checkpoint_id=str(path))


def _shared_load(path: Path, template: Any) -> Any:
    """``dcp.load({"dataloader": template})``, the template being this rank's own state's shape (a collective)."""
    from torch.distributed.checkpoint.state_dict_loader import load

    wanted: dict[str, Any] = {"dataloader": copy.deepcopy(template)}
    load(wanted, checkpoint_id=str(path))
    return wanted["dataloader"]


def _leaves(state: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(state, Mapping):
        out: dict[str, Any] = {}
        for k, v in state.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: state}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and bool(torch.equal(a, b)))
    try:
        return bool(a == b)
    except Exception:
        return False


def whose_state(loaded: Any, saved: Mapping[int, Any], rank: int) -> list[int]:
    """The other ranks whose saved values a state loaded from the shared key holds (empty: its own)."""
    mine = _leaves(saved.get(rank))
    theirs = {q: _leaves(s) for q, s in saved.items() if q != rank}
    owners: set[int] = set()
    for path, value in _leaves(loaded).items():
        if path in mine and _same(value, mine[path]):
            continue
        owners.update(q for q, leaves in theirs.items() if path in leaves and _same(value, leaves[path]))
    return sorted(owners)


def _saved_state(path: Path) -> Any:
    """A rank's saved state, read back for a message (not a step of the reproduction)."""
    return torch.load(path, weights_only=True)[TRAINER_KEYS[0]][TRAINER_KEYS[1]]


def _resume_and_compare(example: Example, result: RankResume, state: Any, expected: list[Any],
                        *, refusable: bool = False) -> None:
    try:
        resumed = example.resumed(state, len(expected))
    except LoaderError as e:
        result.error = f"while resuming from the state ({result.via}): {e}"
        result.refused = refusable and bool(_NAMES_A_RANK.search(str(e.error)))
        return
    result.difference = _own_stream(expected, resumed)
    result.expected_ids, result.resumed_ids = sample_ids(expected), sample_ids(resumed)
    result.expected_batches = len(expected)


def _from_shared_key(example: Example, folder: Path, state: Any, expected: list[Any], via: str,
                     ) -> tuple[RankResume, int | None]:
    """Every rank loads the shared key (a collective, so also a rank whose own save failed) and resumes.

    Also returns the rank whose whole state this rank was given instead of its own, if any.
    """
    world = example.world
    assert world is not None
    result = RankResume(world.rank, via=via)
    world.status("loading the state with torch.distributed.checkpoint (one shared key)")
    try:
        loaded = _shared_load(folder / "dcp-shared", state if state is not None else {})
    except Exception as e:
        result.error = f"torch.distributed.checkpoint.load failed: {type(e).__name__}: {e}"
        return result, None
    if state is None:
        result.error = "its own state could not be saved"
        return result, None
    with recording(Program("")):  # DCP cannot be replayed in one process: see `_replay_shared_key`
        _resume_and_compare(example, result, loaded, expected, refusable=True)
    if not result.exact:
        saved = {}
        for q in range(world.world_size):
            try:
                saved[q] = _saved_state(folder / f"rank{q}.pt")
            except Exception:
                continue
        owners = whose_state(loaded, saved, world.rank)
        if owners:
            names = " and ".join(f"rank {q}" for q in owners)
            result.loaded_from = (f"DCP gave it values saved by {names}: under a key every rank saves, it keeps "
                                  "one copy of each item")
            if not result.refused and len(owners) == 1 and whose_state(loaded, saved, owners[0]) == []:
                return result, owners[0]
            if not result.refused:  # no one rank's whole state: the lines above alone pass
                example.program.add(f"# Under one DCP key shared by every rank, DCP gave this rank a mix of its own "
                                    f"values and those of {names}: that needs real ranks (the command below).")
    return result, None


def _replay_shared_key(example: Example, other: int, position: Position, expected: list[Any]) -> None:
    """The shared-key failure in one process: this rank resumes from the state ``other`` saved.

    Recorded, so the reproduction ends with it; what DCP did across processes (give this
    rank ``other``'s state) becomes one plain line.
    """
    example.program.add(f"# Under one DCP key shared by every rank, DCP gave this rank rank {other}'s state. "
                        "In one process:")
    config = replace(example.config, rank=other)
    drawn = example.drawn_plan.position if isinstance(example.drawn_plan, Checkpoint) else position
    try:
        if drawn.after_stop:  # the other rank took the step as its own epoch lengths make it
            _, lengths = uninterrupted(example.factory, config)
            position = position_on_rank(drawn, lengths)
        state = checkpoint(example.fresh(config=config), position)
        _own_stream(expected, example.resumed(state, len(expected)))
    except LoaderError:
        pass


def _judge_every_save(values: Sequence[list[RankResume]], plan: Checkpoint, ranks: int, where: str) -> None:
    """Each save's resumes over all ranks, one verdict per save; ``where`` says which processes resumed."""
    for via in range(len(values[0])):
        results = [per_rank[via] for per_rank in values]
        shared = results[0].via.startswith(VIA_SHARED)
        every_rank_resumed(results, clause_id="SC30", refusal=SHARED_REFUSAL if shared else "", context=(
            f"every rank checkpointed {plan.position.describe()} (the same step on all {ranks} ranks), saved with "
            f"{results[0].via.split(', resumed')[0]}, and resumed {where}"))


def _judge_ranks(values: Sequence[list[RankResume]], config: LoaderConfig, plan: Checkpoint) -> None:
    _judge_every_save(values, plan, config.world_size if config.world_size > 1 else len(values), "in the same processes")


def resume_in_fresh_processes(example: Example, plan: Checkpoint) -> list[RankResume]:
    """SC30's second half: each saved example resumed by a fresh set of processes, from all three saves."""
    world = example.world
    assert world is not None
    folder = example_folder(example, "SC30")
    rank = world.rank
    expected = torch.load(folder / f"expected-rank{rank}.pt", weights_only=False)
    consumed, sizes = json.loads((folder / f"window-rank{rank}.json").read_text(encoding="utf-8"))
    from_file = RankResume(rank, via=f"{VIA_FILE}, resumed in a fresh process")
    own: Any = None
    try:
        own = state = load_checkpoint(str(folder / f"rank{rank}.pt"))
    except Exception as e:
        from_file.error = f"torch.load(weights_only=True) of rank{rank}.pt failed: {type(e).__name__}: {e}"
    else:
        _resume_and_compare(example, from_file, state, expected)
    from_dcp = RankResume(rank, via=f"{VIA_DCP}, resumed in a fresh process")
    world.status("loading the state with torch.distributed.checkpoint")
    try:
        state = pickle.loads(_dcp_load(folder / "dcp", rank))  # a collective: every rank loads
    except Exception as e:
        from_dcp.error = f"torch.distributed.checkpoint.load failed: {type(e).__name__}: {e}"
    else:
        _resume_and_compare(example, from_dcp, state, expected)
    from_shared, other = _from_shared_key(example, folder, own, expected,
                                          f"{VIA_SHARED}, resumed in a fresh process")
    if other is not None:
        _replay_shared_key(example, other, position_on_rank(plan.position, example.reference()[1]), expected)
    for r in (from_file, from_dcp, from_shared):  # to count the padding epoch by epoch
        r.consumed_ids, r.epoch_sizes = consumed, sizes
    return [from_file, from_dcp, from_shared]


def judge_fresh_processes(values: Sequence[list[RankResume]], config: LoaderConfig, plan: Checkpoint) -> None:
    """The three saves of the example resumed exactly in the fresh processes, on every rank."""
    _judge_every_save(values, plan, len(values), f"in a fresh set of {len(values)} processes")


@clause("SC30", "every-rank-resumes", tier="distributed", kills=4, cost=25, plan=checkpoint_plan, needs=("SC01", LOAD),
        world=_judge_ranks, after_restart=(resume_in_fresh_processes, judge_fresh_processes))
def every_rank_resumes(example: Example, plan: Checkpoint) -> list[RankResume]:
    """Each rank's loader resumes its own stream exactly from its own saved state, and over all ranks
    the resumed streams cover exactly the samples the uninterrupted run would have covered: none
    lost, none repeated; saved per rank with `torch.save`, through DCP with per-rank keys, and through
    DCP with one shared key (as `dcp.save({"dataloader": loader})` does), which exposes rank-blind state."""
    world = example.world
    if world is None:
        raise RuntimeError("SC30 runs on the ranks of a multi-rank executor only")
    folder = example_folder(example, "SC30")
    result = RankResume(world.rank, via=f"{VIA_FILE}, resumed in the saving process")
    reference, lengths = example.reference()
    position = position_on_rank(plan.position, lengths)
    start, end = expected_bounds(lengths, position)
    expected = example.segment("expected", start, end)
    consumed, sizes = window(reference, lengths, position.epoch, start, end)
    (folder / f"window-rank{world.rank}.json").write_text(json.dumps([consumed, sizes]), encoding="utf-8")
    payload, state = b"", None
    path = str(folder / f"rank{world.rank}.pt")
    example.program.bind(path, repr(Path(path).name))  # the reproduction saves beside itself
    try:
        state = checkpoint(example.fresh(), position)
        save_checkpoint(state, path)
        torch.save(expected, folder / f"expected-rank{world.rank}.pt")
        payload = pickle.dumps(state)
    except LoaderError as e:
        result.error = f"while checkpointing {position.describe()}: {e}"
    except Exception as e:
        result.error = f"saving the state failed: torch.save/pickle raised {type(e).__name__}: {e}"
    if result.error is not None:
        state = None
    # Collectives: every rank saves, even one whose loader failed (with an empty payload).
    world.status("saving the state with torch.distributed.checkpoint")
    _dcp_save(folder / "dcp", world.rank, payload)
    world.status("saving the state with torch.distributed.checkpoint (one shared key)")
    try:
        _shared_save(folder / "dcp-shared", state if state is not None else {})
    except Exception as e:  # DCP raises on every rank alike (it gathers the errors): none loads
        from_shared = RankResume(world.rank, via=f"{VIA_SHARED}, resumed in the saving process",
                                 error=f"torch.distributed.checkpoint.save failed: {type(e).__name__}: {e}")
        other = None
    else:
        from_shared, other = _from_shared_key(example, folder, state, expected,
                                              f"{VIA_SHARED}, resumed in the saving process")
    if result.error is None:
        try:
            state = load_checkpoint(path)
        except Exception as e:
            result.error = f"torch.load(weights_only=True) cannot read the saved state back: {type(e).__name__}: {e}"
        else:
            _resume_and_compare(example, result, state, expected)
    if other is not None:
        _replay_shared_key(example, other, position, expected)
    for r in (result, from_shared):  # to count the padding epoch by epoch
        r.consumed_ids, r.epoch_sizes = consumed, sizes
    return [result, from_shared]
