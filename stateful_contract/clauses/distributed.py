"""SC30 every-rank-resumes: each rank resumes its own stream, and together they lose nothing.

Every rank checkpoints its own loader at the same step (trainers checkpoint all ranks
at the same global step) and saves the state the two ways trainers do:

- ``torch.save({"extra_state": {"train_dataloader": state}}, "rank{r}.pt")``, one file
  per rank (MindSpeed-MM's ``extra_state``);
- ``torch.distributed.checkpoint.save`` of ``{"train_dataloader": {"rank_{r}": pickled
  state}}``: rank-unique keys, as torchtitan saves its loaders. Measured on torch 2.13:
  with one shared key, DCP keeps one rank's value (it deduplicates "replicated" items)
  and every rank loads that one, silently.

It resumes in the same processes from the file (a failure there is shrunk), and once
the search is over, in a fresh set of processes from both, where a state that only
means something inside the process that took it fails.

Each rank reports a `RankResume`: whether its resumed stream was exactly its own
uninterrupted stream from the checkpoint on, and which samples (the ``index`` field of
the contract's dataset) each stream held. The clause holds when every rank resumed
exactly; when it does not, the message says which ranks failed and, over all ranks,
which samples were lost and which were repeated, and whose they were: a rank that
resumed another rank's position shows up as repeating that rank's samples.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from .._engine.compare import stream_difference
from .._engine.example import Example, World
from .._engine.plans import Checkpoint, checkpoint_plan, expected_bounds
from .._engine.recording import asserts
from .._engine.state_steps import load_checkpoint, save_checkpoint
from .._engine.steps import LoaderError, Position, checkpoint
from ..config import LoaderConfig
from .registry import LOAD, clause, violated

__all__ = ["RankResume", "every_rank_resumes", "sample_ids"]

#: Sample ids a message lists before eliding.
_SHOWN_IDS = 12


@dataclass
class RankResume:
    """What one rank observed for one checkpoint: its own verdict and its samples."""

    rank: int
    #: How the state travelled, e.g. ``"torch.save per rank"``.
    via: str = ""
    #: The loader raised, or hung, or the state could not be saved or read back.
    error: str | None = None
    hung: bool = False
    #: Where the resumed stream departs from the uninterrupted one (None: exact).
    difference: str | None = None
    #: Sample ids of the uninterrupted stream from the checkpoint on, and of the resumed
    #: stream (None when batches carry no ``index`` field).
    expected_ids: list[int] | None = None
    resumed_ids: list[int] | None = None
    expected_batches: int = 0

    @property
    def exact(self) -> bool:
        return self.error is None and self.difference is None


def sample_ids(batches: Sequence[Any]) -> list[int] | None:
    """The sample indices of a stream, batch after batch, or None without an ``index`` field."""
    ids: list[int] = []
    for batch in batches:
        if not isinstance(batch, Mapping) or "index" not in batch:
            return None
        index = batch["index"]
        values = index.flatten().tolist() if isinstance(index, torch.Tensor) else index
        if isinstance(values, int):
            values = [values]
        if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
            return None
        ids.extend(values)
    return ids


def _ids(counter: Counter[int]) -> str:
    ids = sorted(counter.elements())
    shown = ", ".join(map(str, ids[:_SHOWN_IDS]))
    return f"[{shown}{', ...' if len(ids) > _SHOWN_IDS else ''}] ({len(ids)} sample{'s' if len(ids) != 1 else ''})"


def coverage(results: Sequence[RankResume]) -> list[str]:
    """Over all ranks: samples lost and repeated, attributed to ranks (empty when exact)."""
    if any(r.expected_ids is None or r.resumed_ids is None for r in results):
        return []
    expected = {r.rank: Counter(r.expected_ids) for r in results}
    resumed = {r.rank: Counter(r.resumed_ids) for r in results}
    lines = []
    lost_all = sum(expected.values(), Counter()) - sum(resumed.values(), Counter())
    repeated_all = sum(resumed.values(), Counter()) - sum(expected.values(), Counter())
    for r in results:
        lost = expected[r.rank] - resumed[r.rank]
        extra = resumed[r.rank] - expected[r.rank]
        if lost:
            lines.append(f"rank {r.rank} lost {_ids(lost)} that its uninterrupted run yields")
        if extra:
            # Samples this rank never yields but another does: it resumed that rank's position.
            foreign = [i for i in extra if not expected[r.rank][i]]
            owners = sorted({q for q in expected if q != r.rank and any(expected[q][i] for i in foreign)})
            whose = (f", which the uninterrupted run gives to rank{'s' if len(owners) > 1 else ''} "
                     f"{', '.join(map(str, owners))}" if owners else "")
            lines.append(f"rank {r.rank} yielded {_ids(extra)} more often than its uninterrupted run{whose}")
    if lost_all or repeated_all:
        total = sum(sum(c.values()) for c in expected.values())
        lines.append(f"over all {len(results)} ranks: of the {total} samples the uninterrupted run yields "
                     f"after the checkpoint, lost {_ids(lost_all) if lost_all else 'none'}, "
                     f"repeated {_ids(repeated_all) if repeated_all else 'none'}")
    elif any(not r.exact for r in results):
        lines.append(f"over all {len(results)} ranks the same samples were covered, but not in the "
                     "uninterrupted run's batches and order (or with other field values)")
    return lines


def _every_rank_resumed(results: Sequence[RankResume], *, context: str) -> None:
    """Every rank resumed its own stream exactly; together they lose and repeat nothing."""
    failed = [r for r in results if not r.exact]
    if not failed:
        return
    lines = []
    for r in failed:
        what = r.error if r.error is not None else r.difference
        lines.append(f"rank {r.rank}{f' ({r.via})' if r.via else ''}: " + str(what).replace("\n", "\n  "))
    lines += coverage(results)
    n = len(results)
    violation = violated(
        "SC30", context=context,
        expected=(f"each of the {n} ranks to resume its own stream exactly from its own saved state, and the "
                  f"{n} resumed streams together to cover exactly the samples of the uninterrupted run: "
                  "none lost, none repeated"),
        got=(f"{len(failed)} of {n} ranks {'failed' if any(r.error for r in failed) else 'did not resume exactly'}:"
             "\n  " + "\n  ".join(lines)),
    )
    violation.reproduce_on = failed[0].rank  # type: ignore[attr-defined]
    raise violation


VIA_FILE = "torch.save per rank"
VIA_DCP = "torch.distributed.checkpoint"


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


def _rank_position(position: Position, lengths: list[int]) -> Position:
    """The common checkpoint point as this rank takes it.

    Ranks end an epoch at different lengths only if the loader is uneven across ranks;
    an "after StopIteration" point exists only where this rank's epoch did end.
    """
    return replace(position, after_stop=position.after_stop and lengths[position.epoch] == position.batches)


def _folder(world: World, config: LoaderConfig, plan: Checkpoint) -> Path:
    """The example's files: the same folder on every rank, and again after a restart."""
    key = hashlib.sha1(repr((replace(config, rank=0), plan)).encode()).hexdigest()[:12]
    path = world.workdir / "examples" / key
    path.mkdir(parents=True, exist_ok=True)
    return path


def _resume_and_compare(example: Example, result: RankResume, state: Any, expected: list[Any]) -> None:
    try:
        resumed = example.resumed(state, len(expected))
    except LoaderError as e:
        result.error = f"while resuming from the state ({result.via}): {e}"
        return
    result.difference = _own_stream(expected, resumed)
    result.expected_ids, result.resumed_ids = sample_ids(expected), sample_ids(resumed)
    result.expected_batches = len(expected)


def _judge_ranks(results: Sequence[RankResume], config: LoaderConfig, plan: Checkpoint) -> None:
    n = config.world_size if config.world_size > 1 else len(results)
    _every_rank_resumed(results, context=(
        f"every rank checkpointed {plan.position.describe()} (the same step on all {n} ranks), saved with "
        f"{VIA_FILE}, and resumed in the same processes"))


def resume_in_fresh_processes(example: Example, plan: Checkpoint) -> list[RankResume]:
    """SC30's second half: each saved example resumed by a fresh set of processes, from both saves."""
    world = example.world
    assert world is not None
    folder = _folder(world, example.config, plan)
    rank = world.rank
    expected = torch.load(folder / f"expected-rank{rank}.pt", weights_only=False)
    from_file = RankResume(rank, via=f"{VIA_FILE}, resumed in a fresh process")
    try:
        state = load_checkpoint(str(folder / f"rank{rank}.pt"))
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
    return [from_file, from_dcp]


def judge_fresh_processes(values: Sequence[list[RankResume]], config: LoaderConfig, plan: Checkpoint) -> None:
    """Both saves of the example resumed exactly in the fresh processes, on every rank."""
    n = len(values)
    for via in range(2):
        results = [per_rank[via] for per_rank in values]
        _every_rank_resumed(results, context=(
            f"every rank checkpointed {plan.position.describe()} (the same step on all {n} ranks); the state went "
            f"through {results[0].via.split(',')[0]} and was resumed in a fresh set of {n} processes"))


@clause("SC30", "every-rank-resumes", tier="distributed", plan=checkpoint_plan, needs=("SC01", LOAD),
        world=_judge_ranks, after_restart=(resume_in_fresh_processes, judge_fresh_processes))
def every_rank_resumes(example: Example, plan: Checkpoint) -> RankResume:
    """Each rank's loader resumes its own stream exactly from its own saved state, and over all ranks
    the resumed streams cover exactly the samples the uninterrupted run would have covered: none
    lost, none repeated."""
    world = example.world
    if world is None:
        raise RuntimeError("SC30 runs on the ranks of a multi-rank executor only")
    folder = _folder(world, example.config, plan)
    result = RankResume(world.rank, via=f"{VIA_FILE}, resumed in the saving process")
    _, lengths = example.reference()
    position = _rank_position(plan.position, lengths)
    start, end = expected_bounds(lengths, position)
    expected = example.segment("expected", start, end)
    payload = b""
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
    # A collective: every rank saves, even one whose loader failed (with an empty payload).
    world.status("saving the state with torch.distributed.checkpoint")
    _dcp_save(folder / "dcp", world.rank, payload)
    if result.error is None:
        try:
            state = load_checkpoint(path)
        except Exception as e:
            result.error = f"torch.load(weights_only=True) cannot read the saved state back: {type(e).__name__}: {e}"
        else:
            _resume_and_compare(example, result, state, expected)
    return result
