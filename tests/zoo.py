"""The self-test zoo: loaders that are broken on purpose, one bug each.

Every clause must be killed by at least one loader here (a check that cannot fail is
a defect), and the correct loaders must pass everything (a false positive is as bad
as a miss). `EpochLoader` is a small, correct, hand-written stateful loader; each
broken loader is a subclass that changes one thing, the way real wrappers went wrong.
`docs/zoo.md` is generated from `KILLS` by `benchmarks/zoo_table.py`.
"""

from __future__ import annotations

import copy
import dataclasses
import random
import time
from collections.abc import Iterator
from typing import Any

import torch
from loader_base import EpochOffsetLoader

from stateful_contract import LoaderConfig


class EpochLoader(EpochOffsetLoader):
    """A correct stateful loader written from scratch: epoch number + offset in the epoch
    (`loader_base.EpochOffsetLoader`, the one base of the test loaders).

    Epoch ``e`` shuffles with ``torch.Generator().manual_seed(seed + e)``; like
    StatefulDataLoader, a new ``iter()`` abandons an unfinished epoch, loading is lazy,
    and a state taken after the last batch resumes into an empty epoch.
    """


class StrictEpochLoader(EpochLoader):
    """Correct, and refuses bad states (passes the strict tier SC40)."""

    def fingerprint(self) -> list[int]:
        c = self.config
        return [c.dataset_size, c.batch_size, int(c.shuffle), c.seed, int(c.drop_last), c.rank, c.world_size]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fingerprint": self.fingerprint()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not isinstance(state_dict, dict):
            raise TypeError(f"expected a state dict, got {type(state_dict).__name__}")
        if set(state_dict) != {"epoch", "offset", "fingerprint"}:
            raise ValueError(f"state keys {sorted(state_dict)} are not epoch, offset, fingerprint")
        if state_dict["fingerprint"] != self.fingerprint():
            raise ValueError("state was saved by a loader of another config or rank")
        super().load_state_dict(state_dict)


class SetEpochLoader(EpochLoader):
    """Correct, with ``set_epoch``, as a trainer's loop calls it (judged by SC21).

    ``set_epoch(e)`` chooses the epoch of the next fresh pass; a loaded state whose epoch
    was used up (a checkpoint after its last batch) gives way to a later epoch, so a
    trainer that resumes at the next epoch gets that epoch, not an empty one.
    """

    def set_epoch(self, epoch: int) -> None:
        if self.pending is not None:
            used_up = self.pending["offset"] >= len(self.batches(self.pending["epoch"]))
            if epoch > self.pending["epoch"] and used_up:
                self.pending = None
                self.epoch, self.offset = epoch, 0
        elif not self.in_progress:
            self.epoch, self.offset = epoch, 0


# --- broken on purpose: one bug each -------------------------------------------------


class NoLoadStateDict:
    """SC01: has ``state_dict`` but no ``load_state_dict`` (a plain DataLoader wrapper)."""

    def __init__(self, config: LoaderConfig) -> None:
        self.inner = EpochLoader(config)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()


class KeywordOnlyLoad(EpochLoader):
    """SC02: ``load_state_dict(self, **kwargs)``, as in MindSpeed-MM's bug report."""

    def load_state_dict(self, **kwargs: Any) -> None:  # type: ignore[override]
        super().load_state_dict(kwargs["state_dict"])


class IntKeyedState(EpochLoader):
    """SC03: the state is keyed by ints."""

    def state_dict(self) -> dict[Any, Any]:
        s = super().state_dict()
        return {0: s["epoch"], 1: s["offset"]}

    def load_state_dict(self, state_dict: dict[Any, Any]) -> None:
        super().load_state_dict({"epoch": state_dict[0], "offset": state_dict[1]})


class IgnoresLoadedState(EpochLoader):
    """SC10: ``load_state_dict`` stores nothing; every resume restarts the epoch."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class OffByOneResume(EpochLoader):
    """SC10: resumes one batch late within an epoch (skips the batch at the checkpoint)."""

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        if 0 < self.offset:
            self.offset += 1


class StopIterationStateStillFinishing(EpochLoader):
    """SC10: a state taken after ``StopIteration`` still points at the end of the finished epoch.

    It resumes into an empty epoch, then the next: the stream is intact, but a trainer
    that counts passes loses an epoch (torchdata#1437 before its fix).
    """

    finished: dict[str, Any] | None = None

    def __iter__(self) -> Iterator[Any]:
        self.finished = None
        return super().__iter__()

    def run(self) -> Iterator[Any]:
        epoch, n = self.epoch, len(self.batches(self.epoch))
        yield from super().run()
        self.finished = {"epoch": epoch, "offset": n}

    def state_dict(self) -> dict[str, Any]:
        if self.pending is None and self.finished is not None:
            return dict(self.finished)
        return super().state_dict()


class EndOfEpochStateIgnoresSetEpoch(SetEpochLoader):
    """SC21: ``set_epoch`` leaves a loaded state alone, so a state taken after an epoch's last batch
    resumes into that epoch's empty rest, and the trainer's next epoch is lost (verl#7401, as
    ``StatefulDataLoader`` does over torch's ``DistributedSampler``)."""

    def set_epoch(self, epoch: int) -> None:
        if self.pending is None and not self.in_progress:
            self.epoch, self.offset = epoch, 0


class CountsSinceResume(EpochLoader):
    """SC11: the offset in a state counts batches since the last resume, not since the epoch began.

    The first resume is exact; the state of a resumed loader loses the loaded offset.
    """

    resumed_at = 0

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.resumed_at = self.offset

    def run(self) -> Iterator[Any]:
        yield from super().run()
        self.resumed_at = 0

    def state_dict(self) -> dict[str, Any]:
        s = super().state_dict()
        if self.pending is None:
            s["offset"] -= self.resumed_at
        return s


class NoStateBeforeIter(EpochLoader):
    """SC12: ``state_dict()`` before the first ``iter()`` returns an empty dict, which fails to load."""

    started = False

    def __iter__(self) -> Iterator[Any]:
        self.started = True
        return super().__iter__()

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() if self.started or self.pending is not None else {}


class StaleStateAfterLoad(EpochLoader):
    """SC13: right after ``load_state_dict``, ``state_dict()`` reports the fresh position."""

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": self.offset}


class StateDictSkipsABatch(EpochLoader):
    """SC14: ``state_dict()`` 'commits' a prefetched batch mid-epoch, which is then skipped."""

    def state_dict(self) -> dict[str, Any]:
        if self.in_progress and 0 < self.offset < len(self.batches(self.epoch)):
            self.offset += 1
        return super().state_dict()


class LiveState(EpochLoader):
    """SC15: ``state_dict()`` returns the loader's own dict, which later batches update."""

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.live: dict[str, Any] = {"epoch": 0, "offset": 0}

    def run(self) -> Iterator[Any]:
        for batch in super().run():
            self.live.update(epoch=self.epoch, offset=self.offset)
            yield batch
        self.live.update(epoch=self.epoch, offset=self.offset)

    def state_dict(self) -> dict[str, Any]:
        if self.pending is not None:
            return super().state_dict()
        self.live.update(epoch=self.epoch, offset=self.offset)
        return self.live


class LoadConsumesArgument(EpochLoader):
    """SC16: ``load_state_dict`` pops what it reads out of the caller's dict."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = {"epoch": state_dict.pop("epoch", 0), "offset": state_dict.pop("offset", 0)}
        self.in_progress = False


@dataclasses.dataclass
class Cursor:
    epoch: int
    offset: int


class CustomObjectInState(EpochLoader):
    """SC17: the state holds a custom class, which ``torch.load(weights_only=True)`` refuses."""

    def state_dict(self) -> dict[str, Any]:
        s = super().state_dict()
        return {"cursor": Cursor(s["epoch"], s["offset"])}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        cursor = state_dict["cursor"]
        super().load_state_dict({"epoch": cursor.epoch, "offset": cursor.offset})


class UnseededShuffle(EpochLoader):
    """SC18: shuffles with an unseeded ``random.Random()``: every loader has its own order."""

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.rng_seed = random.SystemRandom().randrange(2**32)

    def batches(self, epoch: int) -> list[list[int]]:
        out = super().batches(epoch)
        random.Random(self.rng_seed + epoch).shuffle(out)
        return out


class HangsOnResume(EpochLoader):
    """Robustness: a resumed loader blocks forever."""

    def restore(self, state: dict[str, Any]) -> None:
        time.sleep(3600)


class RaisesOnResume(EpochLoader):
    """Robustness: a resumed loader raises from inside its iterator."""

    def restore(self, state: dict[str, Any]) -> None:
        raise RuntimeError("cannot resume: shard index not found")


@dataclasses.dataclass
class TokenBatch:
    """A batch as an object, as some trainers collate them: a dataclass holding tensors."""

    input_ids: torch.Tensor
    index: list[int]


class NumpyBatches(EpochLoader):
    """Correct, yields numpy arrays and dataclasses, not tensors (whose ``==`` is elementwise)."""

    def run(self) -> Iterator[Any]:
        import numpy as np

        for batch in super().run():
            ids = batch["input_ids"]
            yield {"input_ids": np.asarray(ids), "tokens": np.int64(ids.numel()),
                   "batch": TokenBatch(ids, batch["index"].tolist())}


class Endless(EpochLoader):
    """Never ends a pass: cycles over its epochs, as an ``infinite=True`` streaming loader does.

    Not a resume bug; the contract, which compares epochs, must say so at once rather than
    wait out the example timeout as if the loader hung.
    """

    def run(self) -> Iterator[Any]:
        while True:
            yield from super().run()
            self.in_progress = True


class TokenByToken(EpochLoader):
    """Correct, and a long pass: each batch comes once per token of its samples (``seq_len`` times)."""

    def batches(self, epoch: int) -> list[list[int]]:
        return [b for b in super().batches(epoch) for _ in range(self.config.seq_len)]


#: Positions handed out by `ProcessLocalState`, by handle: empty in every new process.
_POSITIONS: dict[int, dict[str, Any]] = {}


class ProcessLocalState(EpochLoader):
    """SC10: the state is a handle into a registry of this process, so it resumes exactly in the
    process that took it, in every in-process clause, and restarts the epoch in the next job."""

    def state_dict(self) -> dict[str, Any]:
        if self.pending is not None:  # loaded, not yet resumed: the handle it was given
            return copy.deepcopy(self.pending)
        handle = len(_POSITIONS) + 1
        _POSITIONS[handle] = super().state_dict()
        return {"handle": handle}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(_POSITIONS.get(state["handle"], {"epoch": 0, "offset": 0}))


class HashOrderedShards(EpochLoader):
    """SC10: its batches are ordered by ``hash()`` of shard names, as ``list(set_of_file_names)``
    orders files: the same order in the checker and every process forked from it, another in
    the next job (a new interpreter, another string hash seed), whose resume continues another stream."""

    def batches(self, epoch: int) -> list[list[int]]:
        return sorted(super().batches(epoch), key=lambda b: hash(f"shard-{b[0]:05d}.bin"))


# Factories: the CLI and check() take a callable(config) -> loader.
def epoch_loader(config: LoaderConfig) -> EpochLoader:
    return EpochLoader(config)


def set_epoch_loader(config: LoaderConfig) -> SetEpochLoader:
    return SetEpochLoader(config)


def numpy_batches(config: LoaderConfig) -> NumpyBatches:
    return NumpyBatches(config)


def not_a_loader(config: LoaderConfig) -> int:
    return 42


def factory_raises(config: LoaderConfig) -> EpochLoader:
    raise RuntimeError("no dataset configured")


#: Broken loader -> the clause it is built to violate.
class StartsOnTemplate(EpochLoader):
    """SC19: ``state_dict()`` on a fresh loader starts its epoch, and a later load is then ignored.

    As torchdata.nodes' ``Loader`` before PR #1548: the template state DCP asks for
    creates the iterator, and ``load_state_dict`` only takes effect before one exists.
    """

    started = False

    def state_dict(self) -> dict[str, Any]:
        if self.pending is None and not self.in_progress:
            self.started = True
        return super().state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self.started:
            super().load_state_dict(state_dict)


class ReloadKeepsItsEpoch(EpochLoader):
    """SC20: loaded into a loader that already ran, only the offset is taken; the epoch stays its own."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.in_progress or self.epoch > 0:
            state_dict = {**state_dict, "epoch": self.epoch}
        super().load_state_dict(state_dict)


class LazyNewPass(EpochLoader):
    """SC22: a new ``iter()`` moves to the next epoch only at its first batch.

    So a state taken right after ``iter()`` on a pass that abandoned an unfinished epoch
    (a cut-short pass) still holds the old epoch and offset: the resumed run replays the
    rest of the abandoned epoch.
    """

    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None or not self.in_progress:
            return super().__iter__()
        self.in_progress = False  # like super(), but the move to the next epoch waits

        def later() -> Iterator[Any]:
            self.epoch, self.offset, self.in_progress = self.epoch + 1, 0, True
            yield from self.run()

        return later()


class EndsThePassAtTheStepLimit(EpochLoader):
    """SC22, only at a state taken after the last batch of a pass cut short, before the trainer's break.

    It learns the trainer's step limit from the last pass the trainer broke out of (a new ``iter()`` while that
    pass's epoch had batches left), as a wrapper does that reports an epoch's end to a trainer counting steps
    per epoch (torchtune's ``max_steps_per_epoch``). Once a pass has yielded that many batches it saves the pass
    as over, its offset back to 0, but its epoch moves on only at the next ``iter()``: a resume there replays
    the whole pass. Mid-pass, right after ``iter()`` and across whole epochs its state is right.
    """

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.limit: int | None = None
        self.yielded = 0

    def __iter__(self) -> Iterator[Any]:
        if self.pending is None and self.in_progress and self.offset < len(self.batches(self.epoch)):
            self.limit = self.yielded  # the trainer broke out of the pass: its step limit
        self.yielded = 0
        return super().__iter__()

    def run(self) -> Iterator[Any]:
        for batch in super().run():
            self.yielded += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        if self.pending is None and self.in_progress and self.yielded == self.limit:
            return {"epoch": self.epoch, "offset": 0}  # the pass is over; the epoch should be self.epoch + 1
        return super().state_dict()


class RescalesOffsetByWorkers(EpochLoader):
    """SC23: the offset is kept per worker round and rescaled, silently, to another worker count."""

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "workers": max(1, self.config.num_workers)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        now = max(1, self.config.num_workers)
        offset = state_dict["offset"] * now // state_dict.get("workers", now)
        super().load_state_dict({"epoch": state_dict["epoch"], "offset": offset})


class RefusesWorkerChangeBare(EpochLoader):
    """SC41: refuses another worker count, as torchdata does between two pools (F13), with a bare assert.

    Nothing is lost, so SC23 passes it (with an advisory); the strict tier wants the counts named.
    """

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "workers": self.config.num_workers}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        assert state_dict["workers"] == self.config.num_workers
        super().load_state_dict({"epoch": state_dict["epoch"], "offset": state_dict["offset"]})


class RefusesWorkerChangeByName(RefusesWorkerChangeBare):
    """Correct: refuses another worker count, naming both (passes SC23 and SC41)."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict["workers"] != self.config.num_workers:
            raise ValueError(f"state saved with num_workers={state_dict['workers']}, this loader has "
                             f"num_workers={self.config.num_workers}")
        super().load_state_dict(state_dict)


class FailsAfterAWorkerChange(RefusesWorkerChangeBare):
    """SC23: resumed with another worker count, it yields one batch and then raises: no refusal, a crash
    after the run has started training on the resumed data."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.changed = state_dict["workers"] != self.config.num_workers
        EpochLoader.load_state_dict(self, {"epoch": state_dict["epoch"], "offset": state_dict["offset"]})

    def run(self) -> Iterator[Any]:
        for i, batch in enumerate(super().run()):
            if i == 1 and getattr(self, "changed", False):
                raise RuntimeError(f"worker pool of {self.config.num_workers} lost its shard map")
            yield batch


class WorkerOrderedEpochs(EpochLoader):
    """Correct, with an epoch order that depends on ``num_workers``, as litdata's does (litData#878).

    The epoch's samples are dealt to ``max(1, num_workers)`` workers in turn, each worker batches its
    own share, and the batches come one worker after the other. The state records the worker count
    its epoch was dealt for. Resumed with another count, the rest of the interrupted epoch is the
    old deal's remaining samples, in the order the new deal has them; later epochs are the new deal's.
    """

    def workers(self) -> int:
        return max(1, self.config.num_workers)

    def deal(self, epoch: int, workers: int, drop_last: bool) -> list[list[int]]:
        c = self.config
        order = (torch.randperm(c.dataset_size, generator=torch.Generator().manual_seed(c.seed + epoch)).tolist()
                 if c.shuffle else list(range(c.dataset_size)))
        shares = [order[k::workers] for k in range(workers)]
        per_worker = [[s[i:i + c.batch_size] for i in range(0, len(s), c.batch_size)] for s in shares]
        if drop_last:
            per_worker = [[b for b in w if len(b) == c.batch_size] for w in per_worker]
        rounds = max((len(w) for w in per_worker), default=0)
        return [w[r] for r in range(rounds) for w in per_worker if r < len(w)]

    dealt_for: int | None = None
    rest: tuple[int, list[list[int]]] | None = None  # (epoch, its batches) after a resume with another count

    def batches(self, epoch: int) -> list[list[int]]:
        if self.rest is not None and self.rest[0] == epoch:
            return self.rest[1]
        self.dealt_for = self.workers()
        return self.deal(epoch, self.workers(), self.config.drop_last)

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        saved, now, epoch = state["workers"], self.workers(), state["epoch"]
        self.rest = None
        if saved != now:  # the old deal's batches so far, then its remaining samples in the new deal's order
            old = self.deal(epoch, saved, self.config.drop_last)
            due = {i for b in old[self.offset:] for i in b}
            new_order = [i for b in self.deal(epoch, now, False) for i in b]
            rest = [i for i in new_order if i in due]
            bs = self.config.batch_size
            self.rest = (epoch, old[:self.offset] + [rest[i:i + bs] for i in range(0, len(rest), bs)])

    def state_dict(self) -> dict[str, Any]:
        if self.pending is not None:
            return copy.deepcopy(self.pending)
        dealt = self.dealt_for if self.in_progress and self.dealt_for is not None else self.workers()
        return {"epoch": self.epoch, "offset": self.offset, "workers": dealt}


class SkipsTheOffsetInTheNewOrder(WorkerOrderedEpochs):
    """SC23: an order that depends on ``num_workers``, resumed with another count by skipping the saved
    number of batches of the new deal: samples of the interrupted epoch are lost and others repeated."""

    def restore(self, state: dict[str, Any]) -> None:
        EpochLoader.restore(self, state)
        self.rest = None


KILLS: dict[type, str] = {
    NoLoadStateDict: "SC01",
    KeywordOnlyLoad: "SC02",
    IntKeyedState: "SC03",
    IgnoresLoadedState: "SC10",
    OffByOneResume: "SC10",
    StopIterationStateStillFinishing: "SC10",
    CountsSinceResume: "SC11",
    NoStateBeforeIter: "SC12",
    StaleStateAfterLoad: "SC13",
    StateDictSkipsABatch: "SC14",
    LiveState: "SC15",
    LoadConsumesArgument: "SC16",
    CustomObjectInState: "SC17",
    UnseededShuffle: "SC18",
    StartsOnTemplate: "SC19",
    ReloadKeepsItsEpoch: "SC20",
    LazyNewPass: "SC22",
    EndsThePassAtTheStepLimit: "SC22",
    RescalesOffsetByWorkers: "SC23",
    FailsAfterAWorkerChange: "SC23",
    SkipsTheOffsetInTheNewOrder: "SC23",
    RefusesWorkerChangeBare: "SC41",
    ProcessLocalState: "SC10",
    HashOrderedShards: "SC10",
    EndOfEpochStateIgnoresSetEpoch: "SC21",
    EpochLoader: "SC40",  # correct for the core, but accepts bad states silently
}


class CyclingLoader:
    """Correct and endless: cycles over ``config.stateful_dataloader()`` without end (as ``itertools.cycle``
    would, but starting a new epoch of the base loader each time round), its state the base loader's.
    An endless stream's checks must pass it with no declaration (docs/clauses.md, "Endless streams")."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader()

    def __iter__(self) -> Iterator[Any]:
        while True:
            yield from self.base

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


class EndlessWindowLosesBuffer:
    """An endless grad-acc window wrapper (MindSpeed-MM's ``PrefetchGradAccDataLoader(cyclic=True)`` shape):
    it draws a whole window of ``grad_acc_step`` batches from its base loader, starting the base loader's
    next epoch when one ends (so a window spans the epoch boundary), and yields them one by one; its state is
    the base loader's, which has run ahead by what the window still holds. A checkpoint inside a window
    loses those batches (SC10), also where the base loader rolled over inside the window."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader()
        self.window = config.grad_acc_step

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.base)
        while True:
            buffer = []
            while len(buffer) < self.window:
                try:
                    buffer.append(next(it))
                except StopIteration:
                    it = iter(self.base)  # the base loader rolls over inside the window
            yield from buffer

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


KILLS[EndlessWindowLosesBuffer] = "SC10"


class FirstPassStartsLate(EpochLoader):
    """MindSpeed-MM's ``PrefetchGradAccDataLoader(cyclic=False)`` with worker processes (F28): ``__init__``
    already builds a base iterator, whose workers draw batches the consumed-samples sampler counts as
    consumed, and ``__iter__`` builds another, which starts after them. So the first pass never yields its
    first two batches, with no checkpoint at all; every later pass is whole, and the state says where the
    loader is, so every resume is exact (SC42 alone sees it)."""

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(config)
        self.offset = min(2, len(self.batches(0)))  # the eager iterator's prefetched batches, counted as consumed


KILLS[FirstPassStartsLate] = "SC42"


class EndlessRescalesOffsetByWorkers(RescalesOffsetByWorkers, Endless):
    """SC23 on an endless stream: `Endless` (correct: it cycles epoch after epoch), its offset rescaled to
    another worker count as `RescalesOffsetByWorkers`'s is. Resumed with another ``num_workers`` it jumps
    ahead or back in the stream, silently; before, SC23 did not apply to an endless stream and never saw it."""


class ResumesIntoTheNextEpoch(EpochLoader):
    """Resumed inside an epoch, starts the next one: the rest of the interrupted epoch is never trained. What
    Hugging Face's Trainer does where an epoch's update count is not its floor (transformers#36297): its resume
    computes the epoch from global_step // (batches // gradient_accumulation_steps), one too high."""

    def restore(self, state: dict[str, Any]) -> None:
        if state["offset"]:
            state = {"epoch": state["epoch"] + 1, "offset": 0}
        super().restore(state)
