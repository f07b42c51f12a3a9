"""Loaders for the multi-rank clauses, written for these tests only (SC30's shared DCP key, SC31).

Every rank of a check imports this file by path (``tests/ranked_loaders.py:factory``),
so the factories are module-level functions. `Shards` is a small correct loader at a
fixed world size; each other class changes one thing, the way real loaders went wrong
(or right) on several ranks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from loader_base import EpochOffsetLoader

from stateful_contract import LoaderConfig

HERE = Path(__file__).resolve()
log = logging.getLogger(__name__)


def target(name: str) -> str:
    """The check target of the factory ``name`` in this file."""
    return f"{HERE}:{name}"


class Shards(EpochOffsetLoader):
    """A correct loader at a fixed world size (`loader_base.EpochOffsetLoader`): rank r reads
    ``order[r::W]``, epoch e shuffled with seed + e; each subclass adds to its ``{"epoch", "offset"}``
    state or changes how it is restored."""


# --- broken on a world-size change ------------------------------------------------------


class SkipsItsOwnCount(Shards):
    """Saves how many samples this rank yielded and, resumed, skips that many of its new shard.

    Exact on the same world size; on another one the new shard is not the old one, so the
    skip lands elsewhere: fewer ranks repeat samples, more ranks lose some. No error.
    """

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "samples": sum(len(b) for b in self.batches(self.epoch)[: self.offset])}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.offset, skipped = state["epoch"], 0, 0
        for batch in self.batches(self.epoch):
            if skipped >= state["samples"]:
                break
            skipped, self.offset = skipped + len(batch), self.offset + 1


class WarnsAndStartsOver(Shards):
    """Records the world size, and on another one logs a warning and starts from the beginning."""

    def position(self) -> dict[str, Any]:
        return {**super().position(), "world_size": self.config.world_size}

    def restore(self, state: dict[str, Any]) -> None:
        if state["world_size"] != self.config.world_size:
            log.warning("loader state is for %d ranks, this run has %d: starting from scratch",
                        state["world_size"], self.config.world_size)
            self.epoch, self.offset = 0, 0
            return
        super().restore(state)


class KeyedByShardCount(Shards):
    """Keeps its position under a key made of the shard count, and fails with a bare KeyError on another."""

    def position(self) -> dict[str, Any]:
        return {f"of_{self.config.world_size}": super().position()}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state[f"of_{self.config.world_size}"])


# --- correct: refuse, or reshard exactly --------------------------------------------------


class RefusesAnotherWorld(Shards):
    """Records its rank and world size, and refuses a state saved by another rank or on another world size.

    The rank and the position are one item of the state (a list), not two: under a key shared
    by every rank, torch.distributed.checkpoint keeps one copy of each item, each from a rank
    of its choosing, so a separate ``"rank"`` item could be this rank's while the position
    beside it is another rank's (where the ranks' positions differ, at the end of uneven
    shards), and the check would pass a foreign position.
    """

    def position(self) -> dict[str, Any]:
        return {"where": [self.config.rank, self.config.world_size, self.epoch, self.offset]}

    def restore(self, state: dict[str, Any]) -> None:
        c = self.config
        rank, world_size, epoch, offset = state["where"]
        if world_size != c.world_size:
            raise ValueError(f"this loader state was saved on world size {world_size}, this run has world size "
                             f"{c.world_size}; resharding is not supported")
        if rank != c.rank:
            raise ValueError(f"this loader state belongs to rank {rank}, not to rank {c.rank}")
        self.epoch, self.offset = epoch, offset


class GlobalPosition(Shards):
    """Reshards exactly: the state is the whole world's position in one global order, as Megatron's
    ``consumed_samples`` is.

    Epoch e reads ``order(e)[:end]``, rank r of W the positions ``start + r, start + r + W, ...``;
    ``end`` is the order's length cut to a multiple of W (times the batch size with ``drop_last``),
    so every rank has as many batches as the others. The state says how far the whole world got
    (``consumed``, the same on every rank at the same step) and where the epoch ends; a world of
    another size resumes the rest of the epoch from there, then goes on with its own epochs. That rest,
    cut for the old world, is dealt unevenly over a new one (2 -> 3 ranks): exact (SC31), but out of step
    (SC32).
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.start, self.end = 0, self.usable()

    def usable(self) -> int:
        c = self.config
        unit = c.world_size * (c.batch_size if c.drop_last else 1)
        return c.dataset_size // unit * unit

    def batches(self, epoch: int) -> list[list[int]]:
        c, order = self.config, self.order(epoch)
        mine = [order[p] for p in range(self.start + c.rank, self.end, c.world_size)]
        return [mine[i:i + c.batch_size] for i in range(0, len(mine), c.batch_size)]

    def run(self) -> Iterator[Any]:
        yield from super().run()
        self.start, self.end = 0, self.usable()

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None and self.in_progress:
            self.start, self.end = 0, self.usable()
        return super().__iter__()

    def position(self) -> dict[str, Any]:
        c = self.config
        consumed = min(self.end, self.start + c.world_size * c.batch_size * self.offset)
        return {"epoch": self.epoch, "consumed": consumed, "end": self.end}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.start, self.end, self.offset = state["epoch"], state["consumed"], state["end"], 0


def _pad(dealt: list[int], world_size: int) -> list[int]:
    """``dealt`` made a multiple of ``world_size`` long as ``DistributedSampler`` does: by repeating it from its start."""
    short = -len(dealt) % world_size
    return dealt + (dealt * -(-short // len(dealt)))[:short] if dealt else []


class PaddedReshard(Shards):
    """Reshards exactly, padded as ``DistributedSampler`` pads (``drop_last=False``): every rank has as many batches.

    A fresh epoch deals ``order(e)`` as ``DistributedSampler`` does: padded to a multiple of W
    by repeating its first samples (so 9 samples on 2 ranks deal the first sample twice), or,
    with ``drop_last``, cut to one (and short batches dropped); rank r reads ``dealt[r::W]``.
    Since the shards are even, every rank is at the same batch at the same step, and the state
    (the same on every rank) is the epoch and, per pass of it so far, ``[world size, batches]``:
    from that, any rank of any world can tell which samples the whole world has yielded.
    A world of another size deals the rest of the epoch, the samples not yet yielded, once
    each and in the epoch's order, padded the same way (never cut: a cut would lose them);
    its later epochs are its own. A pad copy of a sample already yielded is not yielded again.
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.passes: list[list[int]] = []  # the epoch's earlier passes: [world size, batches yielded]

    def rest(self, order: list[int], world_size: int, batches: int, first: bool) -> list[int]:
        """What a pass of ``batches`` batches on ``world_size`` ranks leaves of the epoch's samples ``order``."""
        dealt = self.dealt(order, world_size, first)
        yielded = set(dealt[: batches * self.config.batch_size * world_size])
        return [i for i in dict.fromkeys(dealt) if i not in yielded]

    def dealt(self, order: list[int], world_size: int, first: bool) -> list[int]:
        """The pass's samples in dealing order (position p goes to rank p % W), pad copies included."""
        c = self.config
        if not (first and c.drop_last):
            return _pad(order, world_size)
        per_rank = len(order) // world_size // c.batch_size * c.batch_size
        return order[: per_rank * world_size]

    def batches(self, epoch: int) -> list[list[int]]:
        c, order = self.config, self.order(epoch)
        for k, (world_size, batches) in enumerate(self.passes):
            order = self.rest(order, world_size, batches, first=k == 0)
        mine = self.dealt(order, c.world_size, first=not self.passes)[c.rank::c.world_size]
        return [mine[i:i + c.batch_size] for i in range(0, len(mine), c.batch_size)]

    def run(self) -> Iterator[Any]:
        yield from super().run()
        self.passes = []

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None and self.in_progress:
            self.passes = []
        return super().__iter__()

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "passes": [*map(list, self.passes), [self.config.world_size, self.offset]]}

    def restore(self, state: dict[str, Any]) -> None:
        passes = [list(p) for p in state["passes"]]
        self.epoch, (world_size, self.offset) = state["epoch"], passes.pop()
        if world_size != self.config.world_size:  # the rest of the epoch, on this world
            passes.append([world_size, self.offset])
            self.offset = 0
        self.passes = [p for p in passes if p[1] > 0]  # a pass that yielded nothing leaves the epoch whole


class PadsFromTheEpochStart(PaddedReshard):
    """`PaddedReshard`, but a world of another size pads the rest with the epoch's first samples.

    ``DistributedSampler`` pads the list it deals by repeating that list's start; this loader
    deals the rest but repeats the start of the whole epoch's list, which the old world yielded
    first. So on 3 ranks the rest is evened out with samples already trained on (a repeat no
    padding accounts for, except where the old world dealt that sample twice itself); on 1
    rank nothing is padded and the resume is exact.
    """

    def batches(self, epoch: int) -> list[list[int]]:
        if not self.passes:
            return super().batches(epoch)
        c, order, rest = self.config, self.order(epoch), self.order(epoch)
        for k, (world_size, batches) in enumerate(self.passes):
            rest = self.rest(rest, world_size, batches, first=k == 0)
        dealt = rest + (order * c.world_size)[: -len(rest) % c.world_size] if rest else []
        mine = dealt[c.rank::c.world_size]
        return [mine[i:i + c.batch_size] for i in range(0, len(mine), c.batch_size)]


class DropsItsOwnPadCount(PaddedReshard):
    """`PaddedReshard`, but a world of another size takes the old world's pad copies off the wrong end.

    It resumes the old world's remaining dealt list, pad copies included, and knowing that the
    old world padded p copies, drops p samples from that list to undo them: from its front,
    where the rest starts, instead of its end, where ``DistributedSampler`` put them. So it
    loses the next p samples due and yields, in their place, pad copies of samples already
    trained on: the count of samples is right, one due sample is missing behind a pad copy.
    """

    def rest(self, order: list[int], world_size: int, batches: int, first: bool) -> list[int]:
        dealt = self.dealt(order, world_size, first)
        left = dealt[batches * self.config.batch_size * world_size:]
        return left[max(0, len(dealt) - len(order)):]


class ReshardsEveryResume(PaddedReshard):
    """`PaddedReshard`, but every resume deals the rest of the epoch anew, on the world that saved it too.

    On that world the rest is padded again (with a copy of a sample due, where the saved pass
    had a pad copy of one already yielded) and dealt from rank 0: a rank's stream is not its own.
    """

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if self.offset:
            self.passes, self.offset = [*self.passes, [self.config.world_size, self.offset]], 0


def uneven_shards(config: LoaderConfig) -> Shards:
    """Rank r reads ``order[r::W]``, as ``DistributedSampler`` would without its padding: 7 samples on 2 ranks
    deal 4 batches of 1 to rank 0 and 3 to rank 1, and a world of 3 resumed from a 2-rank state deals
    the rest of 8 samples unevenly too. Correct for one rank; on several, only under a trainer that joins
    uneven inputs (SC32)."""
    return Shards(config)


def padded_reshard(config: LoaderConfig) -> PaddedReshard:
    return PaddedReshard(config)


def pads_from_the_epoch_start(config: LoaderConfig) -> PadsFromTheEpochStart:
    return PadsFromTheEpochStart(config)


def drops_its_own_pad_count(config: LoaderConfig) -> DropsItsOwnPadCount:
    return DropsItsOwnPadCount(config)


def reshards_every_resume(config: LoaderConfig) -> ReshardsEveryResume:
    return ReshardsEveryResume(config)


def skips_its_own_count(config: LoaderConfig) -> SkipsItsOwnCount:
    return SkipsItsOwnCount(config)


def warns_and_starts_over(config: LoaderConfig) -> WarnsAndStartsOver:
    return WarnsAndStartsOver(config)


def keyed_by_shard_count(config: LoaderConfig) -> KeyedByShardCount:
    return KeyedByShardCount(config)


def refuses_another_world(config: LoaderConfig) -> RefusesAnotherWorld:
    return RefusesAnotherWorld(config)


def asks_torch_distributed(config: LoaderConfig) -> RefusesAnotherWorld:
    """`RefusesAnotherWorld` whose rank and world size come from ``torch.distributed``, not from the config, as
    torchtitan's and Megatron's builders take them (and ``DistributedSampler`` given no ``rank``)."""
    if dist.is_initialized():
        config = replace(config, rank=dist.get_rank(), world_size=dist.get_world_size())
    return RefusesAnotherWorld(config)


#: Tensor-parallel degree of `tensor_parallel_replicas`.
TP = 2


def tensor_parallel_replicas(config: LoaderConfig) -> RefusesAnotherWorld:
    """A world of data-parallel x tensor-parallel ranks (tp = 2): the loader is built for the *data-parallel* rank
    (``rank // tp`` of ``world_size // tp``), so the tp ranks of one dp rank yield the same batches and save the
    same state, as torchtitan's ``ParallelAwareDataloader`` keyed by ``dp_rank`` (pytorch/torchtitan@571662f0,
    torchtitan/components/dataloader.py: "Store state only for dp rank to avoid replicating the same state across
    other dimensions"); a world size tp does not divide is refused at build, as the trainer's mesh refuses it."""
    if config.world_size % TP:
        raise ValueError(f"world size {config.world_size} is not divisible by the tensor-parallel degree {TP}")
    return RefusesAnotherWorld(replace(config, rank=config.rank // TP, world_size=config.world_size // TP))


_DP_GROUP: Any = None


def asks_its_dp_group(config: LoaderConfig) -> RefusesAnotherWorld:
    """`RefusesAnotherWorld` whose rank and world size come from a data-parallel group it made once and cached
    (``dist.new_group``), as a trainer asks its dp group or mesh dimension, not the default group."""
    global _DP_GROUP
    if dist.is_initialized():
        if _DP_GROUP is None:
            _DP_GROUP = dist.new_group(backend="gloo")
        config = replace(config, rank=dist.get_rank(_DP_GROUP), world_size=dist.get_world_size(_DP_GROUP))
    return RefusesAnotherWorld(config)


class BarrierOnLoad(RefusesAnotherWorld):
    """Waits for every rank at ``load_state_dict`` (a trainer's barrier before the ranks resume together)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if dist.is_initialized():
            dist.barrier()
        super().load_state_dict(state_dict)


def barrier_on_load(config: LoaderConfig) -> BarrierOnLoad:
    return BarrierOnLoad(config)


def global_position(config: LoaderConfig) -> GlobalPosition:
    return GlobalPosition(config)


# --- a fixed global batch (OLMo-core, Megatron): per-rank batch = global batch / world size -----------------


class GlobalBatches(Shards):
    """Deals whole global batches, as Megatron's ``MegatronPretrainingSampler`` and OLMo-core's
    ``NumpyFSLDataLoader`` do: the global batch is ``batch_size x world_size`` samples of the epoch's order,
    rank r takes its contiguous ``batch_size`` of each, and an incomplete last global batch is dropped.

    The state is how many samples of the epoch the whole world consumed (Megatron's ``consumed_samples``),
    so a world of another size resumes from there with its own global batch. Exact where the trainer keeps
    the global batch fixed (the samples dropped at the epoch's end are the same); with the per-rank batch
    fixed instead, the new global batch cuts the rest of the epoch elsewhere, and 2 -> 3 ranks can drop
    samples the 2-rank world had still due (SC31 fails without ``fixed_global_batch``).
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.start = 0  # samples of the epoch's order consumed before this pass (by a resumed world)

    def batches(self, epoch: int) -> list[list[int]]:
        c, order = self.config, self.order(epoch)
        size = c.batch_size * c.world_size
        whole = (len(order) - self.start) // size
        first = [self.start + k * size + c.rank * c.batch_size for k in range(whole)]
        return [order[p:p + c.batch_size] for p in first]

    def run(self) -> Iterator[Any]:
        yield from super().run()
        self.start = 0

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None and self.in_progress:
            self.start = 0
        return super().__iter__()

    def consumed(self) -> int:
        return self.start + self.offset * self.config.batch_size * self.config.world_size

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "consumed": self.consumed()}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch, self.start, self.offset = state["epoch"], state["consumed"], 0


class CountsWithTheNewWorld(GlobalBatches):
    """`GlobalBatches` whose state is the global steps taken and its per-rank batch; a resume works out the
    samples consumed as steps x per-rank batch x the *current* world size. Exact on the world that saved it;
    on another, the old per-rank batch times the new world size is not the global batch the old world
    consumed: 2 -> 1 ranks resumes half way back (samples repeated), 2 -> 3 further on (samples lost)."""

    def position(self) -> dict[str, Any]:
        c = self.config
        return {"epoch": self.epoch, "steps": self.consumed() // (c.batch_size * c.world_size),
                "batch_size": c.batch_size}

    def restore(self, state: dict[str, Any]) -> None:
        consumed = state["steps"] * state["batch_size"] * self.config.world_size
        super().restore({"epoch": state["epoch"], "consumed": consumed})


def global_batches(config: LoaderConfig) -> GlobalBatches:
    return GlobalBatches(config)


def counts_with_the_new_world(config: LoaderConfig) -> CountsWithTheNewWorld:
    return CountsWithTheNewWorld(config)


# --- SC30 under one DCP key shared by every rank -------------------------------------------


class RankSeededShuffle(Shards):
    """Each rank shuffles its shard with a generator of its own, seeded with the rank.

    The state holds that generator's state as of the epoch's start, so a resume draws the
    same permutation again: exact from a per-rank file. But the states of the ranks differ
    and do not say whose they are: under one DCP key every rank gets one copy, shuffles its
    shard with another rank's generator, and resumes a different order, silently.
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.generator = torch.Generator().manual_seed(config.seed * 100 + config.rank)
        self.at_start = self.generator.get_state()
        self.permutation: dict[int, list[int]] = {}

    def shard(self, epoch: int) -> list[int]:
        mine = list(range(self.config.dataset_size))[self.config.rank::self.config.world_size]
        if not self.config.shuffle:
            return mine
        if epoch not in self.permutation:
            self.at_start = self.generator.get_state()
            self.permutation = {epoch: torch.randperm(len(mine), generator=self.generator).tolist()}
        return [mine[i] for i in self.permutation[epoch]]

    def position(self) -> dict[str, Any]:
        self.shard(self.epoch)
        return {**super().position(), "generator": self.at_start.clone()}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.generator.set_state(state["generator"].clone())
        self.permutation = {}


class RankSeededShuffleKeyedByRank(RankSeededShuffle):
    """The same, with the state under a key of its rank, as torchtitan keys its loaders'
    (``{"rank_1": {...}}``): DCP sees a different key on every rank and keeps each."""

    def position(self) -> dict[str, Any]:
        return {f"rank_{self.config.rank}": super().position()}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state[f"rank_{self.config.rank}"])


def rank_seeded_shuffle(config: LoaderConfig) -> RankSeededShuffle:
    return RankSeededShuffle(config)


def rank_seeded_shuffle_keyed_by_rank(config: LoaderConfig) -> RankSeededShuffleKeyedByRank:
    return RankSeededShuffleKeyedByRank(config)


# --- endless streams on several ranks (SC30, SC32) ------------------------------------------


class EndlessShards(Shards):
    """`Shards` cycling without end: one ``iter()``, epoch after epoch of this rank's shard, its state the
    epoch and offset (exact on every rank). Rank r reads ``order[r::W]`` unpadded, so 7 samples on 2 ranks
    deal rank 0 one more batch per cycle than rank 1: the ranks drift apart (SC32)."""

    def run(self) -> Iterator[Any]:
        while True:
            batches = self.batches(self.epoch)
            if not batches:  # a cycle of no batch would spin without yielding: the stream ends instead
                return
            while self.offset < len(batches):
                indices = batches[self.offset]
                self.offset += 1
                yield self.collate(indices)
            self.epoch, self.offset = self.epoch + 1, 0


def endless_uneven_shards(config: LoaderConfig) -> EndlessShards:
    return EndlessShards(config)


class CyclingStatefulDataLoader:
    """Correct and endless on every rank: cycles over ``config.stateful_dataloader()`` (torch's
    DistributedSampler order for the rank, padded), its state the base loader's."""

    def __init__(self, config: LoaderConfig) -> None:
        self.config = config
        self.base = config.stateful_dataloader()

    def cycle(self) -> Iterator[Any]:
        while True:
            yield from self.base

    def __iter__(self) -> Iterator[Any]:
        return self.cycle()

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


class Rank1RunsAhead(CyclingStatefulDataLoader):
    """On rank 1 only, holds the next batch ready (a prefetcher) while its state is the base loader's, which
    has run one batch ahead: every resume of rank 1 loses the batch it held (SC30); rank 0 is exact."""

    def __iter__(self) -> Iterator[Any]:
        it = self.cycle()
        if self.config.rank != 1:
            return it
        return self.one_ahead(it)

    @staticmethod
    def one_ahead(it: Iterator[Any]) -> Iterator[Any]:
        held = next(it)
        while True:
            ready = next(it)
            yield held
            held = ready


def cycling_stateful_dataloader(config: LoaderConfig) -> CyclingStatefulDataLoader:
    return CyclingStatefulDataLoader(config)


def rank1_runs_ahead(config: LoaderConfig) -> Rank1RunsAhead:
    return Rank1RunsAhead(config)
