"""What a loader is built from: `LoaderConfig`, its dataset, and the Hypothesis strategy that draws it.

A factory under test receives a `LoaderConfig` and returns a fresh loader, usually a one-liner around
`config.stateful_dataloader()`, torchdata's own loader for the config. A streaming loader's factory reads
the same samples as an iterable dataset (`LoaderConfig.iterable_dataset`, `hf_iterable_dataset`), so the
contract can still say which samples it lost or repeated.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from hypothesis import strategies as st
from torch.utils.data import Dataset, IterableDataset, get_worker_info

__all__ = ["ConfigSpace", "LoaderConfig", "StatefulTokenIterable", "TokenDataset", "TokenIterable",
           "hf_iterable_dataset", "loader_configs", "shards"]

#: Value used for labels that do not count as tokens, as in Hugging Face / Megatron.
IGNORE_INDEX = -100


class TokenDataset(Dataset[dict[str, Any]]):
    """A map-style dataset of `size` distinct, deterministic token samples.

    Sample ``i`` is ``{"index": i, "input_ids": LongTensor[seq_len], "labels": LongTensor[seq_len]}``.
    Between 1 and ``seq_len`` labels are valid, the rest ``-100``, so a per-token count over a
    window depends on exactly which samples are in it: a lost or repeated batch changes the count.
    """

    def __init__(self, size: int, seq_len: int = 8, salt: int = 0) -> None:
        self.size = size
        self.seq_len = seq_len
        self.salt = salt
        # Samples are built once: the contract reads each one hundreds of times, and
        # building the tensors dominated an in-process example.
        self._samples: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < self.size:
            raise IndexError(f"TokenDataset index {i} out of range(0, {self.size})")
        if i not in self._samples:
            # A cheap, well-spread function of (i, salt): samples differ from each other
            # and from those of a dataset with another salt.
            valid = 1 + (i * 7 + self.salt * 3 + (i * i) % 5) % self.seq_len
            input_ids = (torch.arange(self.seq_len, dtype=torch.long) * 31 + i * 17 + self.salt) % 1000
            labels = input_ids.clone()
            labels[valid:] = IGNORE_INDEX
            self._samples[i] = input_ids, labels
        input_ids, labels = self._samples[i]
        # A new dict each time, so a loader that edits its batch cannot reach the cache
        # through the dict; collation copies the tensors.
        return {"index": i, "input_ids": input_ids, "labels": labels}

    def __repr__(self) -> str:
        return f"TokenDataset(size={self.size}, seq_len={self.seq_len}, salt={self.salt})"


def shards(order: list[int], n_shards: int) -> list[list[int]]:
    """``order`` cut into ``n_shards`` runs of consecutive samples, as even as possible
    (the first ``len(order) % n_shards`` one longer; some empty when ``n_shards`` is larger)."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    return [part.tolist() for part in torch.tensor(order, dtype=torch.long).tensor_split(n_shards)]


class TokenIterable(IterableDataset):  # type: ignore[type-arg]
    """``samples`` in ``order`` as a torch ``IterableDataset``, sharded over worker processes.

    Worker ``w`` of ``W`` yields ``order[w::W]``, so the workers together yield each sample
    once per epoch. It has no ``state_dict``: a ``StatefulDataLoader`` can only resume it by
    fast-forwarding (`StatefulTokenIterable` has one).
    """

    def __init__(self, samples: Dataset[dict[str, Any]], order: list[int]) -> None:
        self.samples = samples
        self.order = order
        self.offset = 0
        self.pending: int | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        shard = self.order if info is None else self.order[info.id :: info.num_workers]
        self.offset, self.pending = (self.pending or 0), None
        return self._run(shard)

    def _run(self, shard: list[int]) -> Iterator[dict[str, Any]]:
        while self.offset < len(shard):
            i = shard[self.offset]
            self.offset += 1
            yield self.samples[i]
        self.offset = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.order)} samples)"


class StatefulTokenIterable(TokenIterable):
    """`TokenIterable` with torchdata's ``Stateful`` protocol: the state is the offset in
    this process' shard; a loaded offset applies to the next ``iter()``, and the position
    moves at ``iter()``, not at the first sample (a state taken in between is the new pass')."""

    def state_dict(self) -> dict[str, Any]:
        return {"offset": self.offset if self.pending is None else self.pending}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = int(state_dict["offset"])


def _generate(shards: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    # Module level, over plain values: datasets pickles the generator and its arguments into
    # worker processes and hashes them for a fingerprint.
    for shard in shards:
        yield from shard


def hf_iterable_dataset(samples: Dataset[dict[str, Any]], order: list[int], n_shards: int = 4) -> Any:
    """A Hugging Face ``datasets.IterableDataset`` of ``samples`` in ``order``, in ``n_shards`` shards of
    consecutive samples (`shards`), as torch tensors, built from a generator (``from_generator``): nothing
    is written to disk, nothing downloaded. ``IterableDataset.shuffle(seed, buffer_size)`` (the shards and
    a buffer of samples) is the caller's to apply."""
    import datasets  # optional: imported only here

    features = datasets.Features({"index": datasets.Value("int64"), "input_ids": datasets.Sequence(
        datasets.Value("int64")), "labels": datasets.Sequence(datasets.Value("int64"))})
    # A list in gen_kwargs is how datasets knows the shards: shard k's generator gets [split[k]].
    split = [[{"index": i, "input_ids": samples[i]["input_ids"].tolist(), "labels": samples[i]["labels"].tolist()}
              for i in shard] for shard in shards(order, n_shards)]
    dataset = datasets.IterableDataset.from_generator(_generate, features=features, gen_kwargs={"shards": split})
    return dataset.with_format("torch")


GeneratorKind = Literal["default", "explicit"]


@dataclass(frozen=True)
class LoaderConfig:
    """One loader configuration; a factory builds a fresh loader from it on every call.

    ``generator="default"`` means no ``generator=`` argument: the sampler seeds itself from
    torch's global RNG, which the contract seeds with ``seed`` right before every factory call
    (as a trainer seeds at start-up). ``"explicit"`` passes ``torch.Generator().manual_seed(seed)``.
    ``persistent_workers`` means nothing without workers, and `stateful_dataloader` then leaves it out.
    """

    dataset_size: int = 8
    batch_size: int = 2
    shuffle: bool = False
    seed: int = 0
    drop_last: bool = False
    num_workers: int = 0
    persistent_workers: bool = False
    grad_acc_step: int = 1
    generator: GeneratorKind = "default"
    seq_len: int = 8
    rank: int = 0
    world_size: int = 1
    extra: tuple[tuple[str, Any], ...] = ()
    """Free-form ``(name, value)`` pairs for factories that need more knobs."""
    endless: bool = False
    """The loader's passes do not end (it cycles over its data: ``infinite=True``, ``itertools.cycle``,
    MindSpeed-MM's ``cyclic=True``), declared or found by the check: the contract then compares one
    endless stream, not epochs (docs/clauses.md, "Endless streams"). A factory may read it to build
    its own endless mode."""

    def __post_init__(self) -> None:
        for name in ("dataset_size", "batch_size", "grad_acc_step"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in range(world_size={self.world_size}), got {self.rank}")
        if self.generator not in ("default", "explicit"):
            raise ValueError(f"generator must be 'default' or 'explicit', got {self.generator!r}")

    @functools.cached_property
    def dataset(self) -> TokenDataset:
        """The map-style dataset every loader of this config reads."""
        return TokenDataset(self.dataset_size, self.seq_len, salt=self.seed % 97)

    def __getstate__(self) -> dict[str, Any]:
        # The cached dataset stays behind: a config crosses process boundaries (ranks,
        # supervised children), and each side builds its own samples.
        return {k: v for k, v in self.__dict__.items() if k != "dataset"}

    def stateful_dataloader(self, **overrides: Any) -> Any:
        """torchdata's `StatefulDataLoader` for this config: the reference base loader.

        Keyword ``overrides`` replace constructor arguments (``snapshot_every_n_steps=3``,
        ``batch_sampler=...``). With ``world_size > 1``, or in a torch.distributed process group of
        any size, the batches are those of torch's ``DistributedSampler`` for ``rank``, from
        `stateful_contract.samplers.DistributedBatchSampler`: torchdata's ``StatefulDistributedSampler``
        loses epochs on resume (docs/findings.md, F4, F12). Workers ``fork`` on Linux: ``spawn``
        costs a second per loader.
        """
        from torchdata.stateful_dataloader import StatefulDataLoader
        from torchdata.stateful_dataloader.sampler import RandomSampler

        kwargs: dict[str, Any] = {"batch_size": self.batch_size, "drop_last": self.drop_last,
                                  "num_workers": self.num_workers}
        # Under torch.distributed the batch sampler is the distributed one at any world size,
        # as a trainer launched on one rank builds it: a state saved on several ranks and
        # loaded on one is then refused by name (SC31), where torchdata's plain samplers
        # would skip the saved rank's count of batches of another order, silently.
        distributed = self.world_size > 1 or (torch.distributed.is_available() and torch.distributed.is_initialized())
        if distributed and not {"sampler", "batch_sampler"} & overrides.keys():
            from .samplers import DistributedBatchSampler

            # batch_size, drop_last and shuffle go to the batch sampler (the loader refuses them beside it).
            kwargs["batch_sampler"] = DistributedBatchSampler(
                self.dataset, overrides.pop("batch_size", kwargs.pop("batch_size")),
                num_replicas=self.world_size, rank=self.rank, shuffle=overrides.pop("shuffle", self.shuffle),
                seed=self.seed, drop_last=overrides.pop("drop_last", kwargs.pop("drop_last")))
        elif not distributed:
            # An explicit generator goes to torchdata's stateful sampler, not to the loader, or a
            # resume shuffles later epochs differently (docs/findings.md, F1: why, and this workaround).
            if self.shuffle and self.generator == "explicit":
                kwargs["sampler"] = RandomSampler(self.dataset, generator=torch.Generator().manual_seed(self.seed))
            else:
                kwargs["shuffle"] = self.shuffle
        if self.num_workers > 0 and sys.platform.startswith("linux"):
            kwargs["multiprocessing_context"] = "fork"
        if self.num_workers > 0 and self.persistent_workers:
            kwargs["persistent_workers"] = True
        kwargs.update(overrides)
        return StatefulDataLoader(self.dataset, **kwargs)

    def iterable_dataset(self, *, stateful: bool = False, shuffle: bool | None = None) -> Any:
        """The config's samples as a torch ``IterableDataset`` sharded over workers (`TokenIterable`),
        shuffled from ``seed`` if ``shuffle`` (default ``self.shuffle``); ``stateful=True``: a state_dict."""
        order = self.sample_order(self.shuffle if shuffle is None else shuffle)
        return (StatefulTokenIterable if stateful else TokenIterable)(self.dataset, order)

    def hf_iterable_dataset(self, n_shards: int = 4, *, shuffle: bool = False) -> Any:
        """The config's samples as a Hugging Face ``datasets.IterableDataset`` of ``n_shards`` shards (needs
        ``datasets``, not a dependency); ``shuffle=True`` permutes them once from ``seed`` before sharding."""
        return hf_iterable_dataset(self.dataset, self.sample_order(shuffle), n_shards)

    def sample_order(self, shuffle: bool) -> list[int]:
        """The order an iterable dataset of this config yields (it shuffles itself): ``range(size)``,
        or with ``shuffle`` one permutation of it drawn from ``seed``."""
        if not shuffle:
            return list(range(self.dataset_size))
        return torch.randperm(self.dataset_size, generator=torch.Generator().manual_seed(self.seed)).tolist()

    @property
    def epoch_batches(self) -> int:
        """Batches one epoch of this rank's share of the dataset makes with a plain batch sampler (0 with
        ``drop_last`` and fewer samples than ``batch_size``): an endless stream's horizon is counted in them."""
        samples = -(-self.dataset_size // self.world_size)
        return samples // self.batch_size if self.drop_last else -(-samples // self.batch_size)

    def as_code(self) -> str:
        """A Python expression that rebuilds this config (used in reproductions)."""
        defaults = LoaderConfig()
        changed = [name for name in self.__dataclass_fields__ if getattr(self, name) != getattr(defaults, name)]
        return f"LoaderConfig({', '.join(f'{name}={getattr(self, name)!r}' for name in changed)})"


def _every_rank_has_a_batch(config: LoaderConfig, ranks: int) -> bool:
    """Whether an epoch of ``config`` gives each of ``ranks`` ranks a batch however its shards are cut: its
    share of the dataset rounded down (a ``drop_last`` DistributedSampler drops the rest, an unpadded split
    leaves the last ranks short), and, with ``drop_last``, a whole batch of it."""
    share = config.dataset_size // ranks
    return (share // config.batch_size if config.drop_last else share) > 0


@st.composite
def loader_configs(draw: st.DrawFn, *, num_workers: st.SearchStrategy[int] = st.just(0),
                   dataset_size: st.SearchStrategy[int] = st.integers(1, 24),
                   batch_size: st.SearchStrategy[int] = st.integers(1, 5),
                   grad_acc_step: st.SearchStrategy[int] = st.integers(1, 8),
                   rank: int = 0, world_size: int = 1, endless: bool = False) -> LoaderConfig:
    """Configurations the way users build loaders.

    Shrinks towards the simplest loader: no shuffling, default generator, no ``drop_last``, one
    sample per batch, ``grad_acc_step=1``, workers that are not persistent. The ranges cover uneven
    last batches, ``drop_last`` epochs with no batch at all, windows longer than an epoch
    (``grad_acc_step`` > batches per epoch) and epochs whose last window is short.
    """
    # Drawn in the order of the arguments. persistent_workers is drawn only with workers (so configs
    # without them draw as before): half the worker examples keep their workers across epochs, as
    # many trainers do, and fork them once.
    return LoaderConfig(
        dataset_size=draw(dataset_size), batch_size=draw(batch_size), shuffle=draw(st.booleans()),
        generator=draw(st.sampled_from(get_args(GeneratorKind))), seed=draw(st.integers(0, 2**16)),
        drop_last=draw(st.booleans()), num_workers=(workers := draw(num_workers)),
        persistent_workers=workers > 0 and draw(st.booleans()), grad_acc_step=draw(grad_acc_step),
        rank=rank, world_size=world_size, endless=endless)


#: The fields of `ConfigSpace` a command line may narrow, and the least value each takes.
_SPACE_FIELDS = {"num_workers": 0, "dataset_size": 1, "batch_size": 1, "grad_acc_step": 1}


def _space_values(name: str, text: str, *, least: int) -> tuple[int, ...]:
    """``0,2`` -> (0, 2) for ``num_workers``; ``1..8`` -> (1, 8), ``4`` -> (4, 4) for a range field."""
    def number(part: str) -> int:
        part = part.strip()
        if not part.isdigit() or int(part) < least:
            raise ValueError(f"{name} takes whole numbers >= {least}, got {part!r} in {name}={text}")
        return int(part)

    low, dots, high = text.partition("..")
    if dots:
        bounds = number(low), number(high)
        if bounds[0] > bounds[1]:
            raise ValueError(f"{name}={text} is an empty range (write LOW..HIGH, LOW <= HIGH)")
        return tuple(range(bounds[0], bounds[1] + 1)) if name == "num_workers" else bounds
    if name == "num_workers":
        return tuple(sorted({number(part) for part in text.split(",")}))
    if "," in text:
        raise ValueError(f"{name} takes a range LOW..HIGH or one number, got {name}={text}")
    return number(text), number(text)


@dataclass(frozen=True)
class ConfigSpace:
    """The part of the configuration space a check explores.

    Narrow it when an implementation only supports part of it (a loader without worker support:
    ``num_workers=(0,)``). Ranges are inclusive ``(low, high)``. A command line writes it as `parse` reads
    it (`as_items` writes it so): ``num_workers=0,2 grad_acc_step=1..8``."""

    num_workers: tuple[int, ...] = (0, 1, 2)
    dataset_size: tuple[int, int] = (1, 24)
    batch_size: tuple[int, int] = (1, 5)
    grad_acc_step: tuple[int, int] = (1, 8)
    #: The loader is endless (`LoaderConfig.endless`): every config drawn says so, and none has an epoch of
    #: no batch (a loader cycling over an empty epoch spins without yielding).
    endless: bool = False

    def fitted(self, config: LoaderConfig) -> LoaderConfig:
        """``config`` as this space draws it (endless or not), each field moved to the nearest value the space
        allows: fixed and explicit examples go through here. A space narrowed to what a loader supports
        (Megatron's samplers need a whole micro-batch on every rank) is never checked outside it."""
        def clamp(value: int, bounds: tuple[int, int]) -> int:
            return min(max(value, bounds[0]), bounds[1])

        workers = min(self.num_workers, key=lambda n: (abs(n - config.num_workers), n))
        fitted = dataclasses.replace(
            config, endless=self.endless, num_workers=workers,
            dataset_size=clamp(config.dataset_size, self.dataset_size),
            batch_size=clamp(config.batch_size, self.batch_size),
            grad_acc_step=clamp(config.grad_acc_step, self.grad_acc_step))
        return config if fitted == config else fitted

    def holds(self, config: LoaderConfig) -> bool:
        """Whether this space draws ``config``: a failure an earlier run saved is replayed only inside the
        space the check now declares (one narrowed since is not failed on an example it excludes)."""
        return (config.endless == self.endless and config.num_workers in self.num_workers
                and self.dataset_size[0] <= config.dataset_size <= self.dataset_size[1]
                and self.batch_size[0] <= config.batch_size <= self.batch_size[1]
                and self.grad_acc_step[0] <= config.grad_acc_step <= self.grad_acc_step[1])

    @classmethod
    def parse(cls, text: str | Sequence[str]) -> ConfigSpace:
        """The space ``text`` narrows the default one to: ``NAME=VALUES`` items, space-separated (or a
        sequence of them); ``num_workers`` takes counts (``0,2``) or a range (``0..2``), the other fields a
        range ``LOW..HIGH`` or one number. `ValueError` says which item is wrong and what it takes."""
        items = text.split() if isinstance(text, str) else [part for item in text for part in item.split()]
        if not items:
            raise ValueError("takes NAME=VALUES items, e.g. num_workers=0,2 grad_acc_step=1..8; got nothing")
        defaults, given = cls(), {}
        for item in items:
            name, sep, values = item.partition("=")
            name = name.strip()
            if not sep or name not in _SPACE_FIELDS:
                raise ValueError(f"takes NAME=VALUES items, NAME one of {', '.join(_SPACE_FIELDS)} "
                                 f"(e.g. num_workers=0,2 grad_acc_step=1..8), got {item!r}")
            if name in given:
                raise ValueError(f"names {name} twice ({item!r})")
            given[name] = _space_values(name, values, least=_SPACE_FIELDS[name])
        return cls(**{name: given.get(name, getattr(defaults, name)) for name in _SPACE_FIELDS})

    def as_items(self) -> list[str]:
        """The ``NAME=VALUES`` items `parse` reads back into this space: the fields narrowed (not `endless`)."""
        return [f"{name}={','.join(map(str, value)) if name == 'num_workers' else '{}..{}'.format(*value)}"
                for name in _SPACE_FIELDS if (value := getattr(self, name)) != getattr(ConfigSpace, name)]

    def configs(self, *, workers: bool, rank: int = 0, world_size: int = 1,
                ranks: int = 1) -> st.SearchStrategy[LoaderConfig]:
        """Configs with ``num_workers == 0`` (``workers=False``) or with worker processes; endless ones give
        each of ``ranks`` ranks a batch an epoch (a cycle over a rank's empty share spins without yielding)."""
        counts = [n for n in self.num_workers if (n > 0) == workers]
        if not counts:
            return st.nothing()
        drawn = loader_configs(
            num_workers=st.sampled_from(counts), dataset_size=st.integers(*self.dataset_size),
            batch_size=st.integers(*self.batch_size), grad_acc_step=st.integers(*self.grad_acc_step),
            rank=rank, world_size=world_size, endless=self.endless)
        return drawn.filter(lambda c: _every_rank_has_a_batch(c, ranks)) if self.endless else drawn
