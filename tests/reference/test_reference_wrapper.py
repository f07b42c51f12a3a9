"""Hand-rolled checks of the reference wrapper and of MindSpeed-MM's bug report's broken wrappers.

Independent of the contract engine on purpose: if the engine had a bug that let a bad
loader pass, these tests would still hold the reference (and the known-bad examples) to
the letter. Method: take a loader's uninterrupted stream over `EPOCHS` epochs, take its
state at every checkpoint point (before the first ``iter()``, after ``iter()``, after
each batch, after ``StopIteration``) and resume a fresh loader from each state; the
resumed stream must equal the uninterrupted stream from that point on, batch by batch
and field by field (window token counts included).

torch's global (CPU) RNG is seeded with ``config.seed`` right before every factory call: a
shuffling loader with the default generator seeds its sampler from it at construction.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import pickle
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import torch

from stateful_contract.config import LoaderConfig
from stateful_contract.reference import (
    AVG_TOKEN_COUNT_KEY,
    WINDOW_TOKEN_COUNT_KEY,
    MindSpeedPrefetchGradAccDataLoader,
    PrefetchGradAccDataLoader,
    ProposedFixPrefetchGradAccDataLoader,
    mindspeed_wrapper,
    proposed_fix_wrapper,
    reference_wrapper,
    stateful_dataloader,
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


EPOCHS = 3
Batch = dict[str, Any]
Factory = Callable[[LoaderConfig], Any]
#: A checkpoint point: (epoch, batches consumed in that epoch, StopIteration already seen).
Point = tuple[int, int, bool]


# -- helpers ---------------------------------------------------------------------------


def make(factory: Factory, config: LoaderConfig) -> Any:
    # torch.manual_seed(config.seed) for a CPU-only process: it also queues lazy CUDA/XPU/MTIA
    # seeding, each recording a formatted stack trace (about 10 ms a call under pytest).
    torch.default_generator.manual_seed(config.seed)
    return factory(config)


def saved_after(batches: int, config: LoaderConfig) -> tuple[Any, Iterator[Batch], dict[str, Any]]:
    """The reference wrapper, its iterator after ``batches`` batches, and the state it saves there."""
    loader = make(reference_wrapper, config)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return loader, it, loader.state_dict()


def same(a: Any, b: Any) -> bool:
    """Deep equality for batches and states: tensors by dtype, shape and value."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (
            isinstance(a, Mapping)
            and isinstance(b, Mapping)
            and a.keys() == b.keys()
            and all(same(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def show(batches: list[Batch]) -> list[tuple[list[int], int]]:
    """Readable form of a stream: (sample indices, window token count) per batch."""
    return [(b["index"].tolist(), int(b.get(WINDOW_TOKEN_COUNT_KEY, -1))) for b in batches]


def assert_same_stream(got: list[Batch], expected: list[Batch], where: str) -> None:
    assert len(got) == len(expected), f"{where}: {len(got)} batches, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert same(g, e), f"{where}: batch {i} differs:\n got      {show(got)}\n expected {show(expected)}"


def flat(epochs: list[list[Batch]]) -> list[Batch]:
    return [b for epoch in epochs for b in epoch]


def epochs_of(loader: Any, n: int) -> list[list[Batch]]:
    return [list(loader) for _ in range(n)]


def resumed_epochs(
    factory: Factory, config: LoaderConfig, state: dict[str, Any], n_batches: int, max_epochs: int
) -> list[list[Batch]]:
    """Epochs of a fresh loader resumed from `state`, until `n_batches` are seen (at least one epoch).

    Stopping early matters with workers: every epoch starts a new worker pool.
    """
    loader = make(factory, config)
    loader.load_state_dict(state)
    got = [list(loader)]
    while sum(map(len, got)) < n_batches and len(got) < max_epochs:
        got.append(list(loader))
    return got


def roundtrip_torch(state: dict[str, Any]) -> dict[str, Any]:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded: dict[str, Any] = torch.load(buf, weights_only=True)
    return loaded


def states_along(
    factory: Factory, config: LoaderConfig, epochs: int
) -> tuple[list[list[Batch]], dict[Point | str, dict[str, Any]], dict[Point | str, dict[str, Any]]]:
    """Iterate `epochs` epochs calling state_dict() at every point.

    Returns the stream, the states as returned, and deep copies taken at capture time
    (to check later that iterating on did not change the returned states).
    """
    loader = make(factory, config)
    states: dict[Point | str, dict[str, Any]] = {}
    copies: dict[Point | str, dict[str, Any]] = {}

    def capture(key: Point | str) -> None:
        states[key] = loader.state_dict()
        copies[key] = copy.deepcopy(states[key])

    capture("fresh")
    stream: list[list[Batch]] = []
    for e in range(epochs):
        it = iter(loader)
        capture((e, 0, False))
        batches: list[Batch] = []
        for batch in it:
            batches.append(batch)
            capture((e, len(batches), False))
        capture((e, len(batches), True))
        stream.append(batches)
    return stream, states, copies


def position(full: list[list[Batch]], point: Point | str) -> int:
    """Index in the concatenated stream of the first batch after `point`."""
    if point == "fresh":
        return 0
    assert isinstance(point, tuple)
    e, k, _ = point
    return sum(len(full[i]) for i in range(e)) + k


def assert_resumes_exactly(
    factory: Factory,
    config: LoaderConfig,
    full: list[list[Batch]],
    point: Point | str,
    state: dict[str, Any],
    aligned: bool = True,
) -> None:
    """The resumed stream is the uninterrupted one from `point`, epoch by epoch as torchdata's.

    The contract compares the concatenated stream. The reference also lines up epochs
    exactly as ``StatefulDataLoader`` does: a state taken after the last batch but before
    StopIteration resumes to an empty epoch first, one taken after StopIteration resumes
    straight into the next epoch.
    """
    where = f"{config.as_code()} resumed at {point}"
    if point == "fresh":
        expected_epochs = full
    else:
        assert isinstance(point, tuple)
        e, k, stopped = point
        expected_epochs = full[e + 1 :] if stopped else [full[e][k:], *full[e + 1 :]]
    expected_flat = flat(full)[position(full, point) :]
    got = resumed_epochs(
        factory, config, state, len(expected_flat), len(expected_epochs) + (0 if aligned else 2)
    )
    # The contract's criterion: the concatenated stream.
    assert_same_stream(flat(got)[: len(expected_flat)], expected_flat, where)
    if not aligned:
        return
    # Epoch alignment. (`got` covers the whole expected stream, so comparing the epochs
    # both have compares every batch.)
    assert all(same(g, x) for g, x in zip(got, expected_epochs, strict=False)), (
        f"{where}: epochs do not line up: {[show(x) for x in got]}"
    )


def leaves_of(state: Any) -> list[Any]:
    """The non-dict leaves of a nested state, checking that every key is a str."""
    if isinstance(state, dict):
        assert all(isinstance(k, str) for k in state), f"non-str key in {list(state)}"
        return [leaf for value in state.values() for leaf in leaves_of(value)]
    return [state]


def window_bounds(config: LoaderConfig, n_batches: int, k: int) -> tuple[int, int]:
    """(start, end) batch offsets of the window containing batch `k` of an epoch of `n_batches`."""
    g = config.grad_acc_step
    start = (k // g) * g
    return start, min(start + g, n_batches)


# -- the grid --------------------------------------------------------------------------

# (dataset_size, batch_size, drop_last): uneven last batch, even epoch, drop_last,
# one-sample batches, an epoch with no batch at all, one batch per epoch (windows longer
# than the epoch for grad_acc_step > 1).
SHAPES = [(7, 2, False), (8, 2, False), (10, 3, True), (4, 1, False), (1, 2, True), (5, 5, False)]
GRID = [
    LoaderConfig(
        dataset_size=ds,
        batch_size=bs,
        drop_last=dl,
        shuffle=shuffle,
        grad_acc_step=g,
        generator="explicit" if (ds + g) % 2 else "default",
        seed=1000 * ds + 10 * g + shuffle,
    )
    for ds, bs, dl in SHAPES
    for g in range(1, 6)
    for shuffle in (False, True)
]
WORKER_GRID = [
    LoaderConfig(dataset_size=7, batch_size=2, shuffle=True, grad_acc_step=3, num_workers=2, seed=11),
    LoaderConfig(dataset_size=7, batch_size=2, drop_last=True, grad_acc_step=2, num_workers=1, seed=12),
]


def config_id(config: LoaderConfig) -> str:
    return (
        f"n{config.dataset_size}b{config.batch_size}{'d' if config.drop_last else ''}"
        f"g{config.grad_acc_step}{'s' if config.shuffle else ''}{config.generator[0]}w{config.num_workers}"
    )


# -- reference wrapper: content --------------------------------------------------------


@pytest.mark.parametrize("config", GRID[::3] + WORKER_GRID[:1], ids=config_id)
def test_stream_is_base_stream_with_window_token_counts(config: LoaderConfig) -> None:
    """Same batches as the base loader; each carries its window's valid-token count."""
    epochs = EPOCHS if config.num_workers == 0 else 1  # each worker epoch starts a worker pool
    base = epochs_of(make(stateful_dataloader, config), epochs)
    wrapped = epochs_of(make(reference_wrapper, config), epochs)
    if config.num_workers == 0:
        again = epochs_of(make(reference_wrapper, config), epochs)
        assert same(wrapped, again), "two fresh loaders from one config differ (SC18 premise)"
    assert [len(e) for e in wrapped] == [len(e) for e in base]
    g = config.grad_acc_step
    for epoch_base, epoch_wrapped in zip(base, wrapped, strict=True):
        for start in range(0, len(epoch_base), g):
            window = epoch_base[start : start + g]  # a window never spans an epoch
            tokens = sum(int((b["labels"] > -100).sum()) for b in window)
            for b, w in zip(window, epoch_wrapped[start : start + g], strict=True):
                assert set(w) == set(b) | {WINDOW_TOKEN_COUNT_KEY, AVG_TOKEN_COUNT_KEY}
                assert all(same(w[key], b[key]) for key in b)
                assert w[WINDOW_TOKEN_COUNT_KEY].dtype == torch.int64
                assert int(w[WINDOW_TOKEN_COUNT_KEY]) == tokens
                assert float(w[AVG_TOKEN_COUNT_KEY]) == pytest.approx(tokens / len(window))


class _ListLoader:
    """A minimal stateful loader over fixed batch objects, to see whether they get mutated."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches = batches
        self.pos = 0
        self.pending: int | None = None

    def __iter__(self) -> Iterator[Batch]:
        self.pos = self.pending or 0
        self.pending = None
        while self.pos < len(self.batches):
            self.pos += 1
            yield self.batches[self.pos - 1]

    def state_dict(self) -> dict[str, Any]:
        return {"pos": self.pos}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = state_dict["pos"]


def test_base_batches_are_not_mutated_and_keys_are_configurable() -> None:
    batches = [{"labels": torch.tensor([1, -100, 3, -5]), "x": i} for i in range(3)]
    originals = copy.deepcopy(batches)
    loader = PrefetchGradAccDataLoader(
        _ListLoader(batches), 2, token_count_key="n_tok", avg_token_count_key=None, ignore_index=-1
    )
    out = list(loader)
    assert same(batches, originals)
    assert [sorted(b) for b in out] == [["labels", "n_tok", "x"]] * 3
    assert [int(b["n_tok"]) for b in out] == [4, 4, 2]  # > -1: 1 and 3 count, -100 and -5 do not
    assert all(o is not b for o, b in zip(out, batches, strict=True))


# -- reference wrapper: resume ---------------------------------------------------------


def _check_every_point(
    config: LoaderConfig,
    points: Callable[[Point | str], bool],
    epochs: int = EPOCHS,
    checkpoint_epochs: int = 2,
    serialize: bool = False,
    aligned: bool = True,
) -> None:
    full = epochs_of(make(reference_wrapper, config), epochs)
    stream, states, copies = states_along(reference_wrapper, config, checkpoint_epochs)
    # SC14: calling state_dict() at every point did not change the stream.
    assert_same_stream(
        flat(stream), flat(full[:checkpoint_epochs]), f"{config.as_code()} with state_dict() every step"
    )
    for key, state in states.items():
        # SC15: returned states are snapshots, unchanged by iterating on.
        assert same(state, copies[key]), f"state at {key} changed after it was returned"
        # SC03/SC17: str keys all the way down; int/bool/None/tensor leaves.
        leaves = leaves_of(state)
        assert all(x is None or isinstance(x, (int, bool, torch.Tensor)) for x in leaves), key
    checked = 0
    for key, state in states.items():
        if points(key):
            before = copy.deepcopy(state)
            assert_resumes_exactly(
                reference_wrapper, config, full, key, roundtrip_torch(state) if serialize else state, aligned
            )
            assert same(state, before), f"load_state_dict modified its argument (state at {key})"  # SC16
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("config", GRID, ids=config_id)
def test_resumes_exactly_at_every_point(config: LoaderConfig) -> None:
    """Every point of epochs 0 and 1: before iter, after iter, after each batch, after StopIteration."""
    _check_every_point(config, lambda key: True)


@pytest.mark.parametrize("config", WORKER_GRID, ids=config_id)
def test_resumes_exactly_with_workers(config: LoaderConfig) -> None:
    """Worker loaders (every epoch starts a worker pool, 0.1 s or more): before the first
    batch, mid-window, after the last batch, after StopIteration."""
    n0 = len(make(stateful_dataloader, config))  # len() starts no worker
    wanted = {"fresh", (0, 1, False), (0, n0, False), (0, n0, True)}
    if config.num_workers == 1:
        wanted = {(0, 1, False), (0, n0, False)}
    _check_every_point(config, wanted.__contains__, epochs=2, checkpoint_epochs=1, serialize=True)


DISTRIBUTED_GRID = [
    LoaderConfig(
        dataset_size=ds, batch_size=bs, grad_acc_step=g, shuffle=sh, world_size=2, rank=rank, seed=21
    )
    for ds, bs, g, sh in [(3, 1, 2, False), (9, 2, 3, True), (7, 1, 4, False)]
    for rank in (0, 1)
]


@pytest.mark.parametrize("config", DISTRIBUTED_GRID, ids=lambda c: f"{config_id(c)}r{c.rank}")
def test_resumes_exactly_with_a_distributed_sampler(config: LoaderConfig) -> None:
    """One rank's loader (torchdata's StatefulDistributedSampler), every point of epochs 0 and 1.

    Compared as one stream: that sampler resumes a state taken at an epoch start or end
    into an empty epoch first (measured on torchdata 0.11), so epochs do not line up.
    The first-window case is the one the wrapper must work around (see `read_window`).
    """
    _check_every_point(config, lambda key: True, aligned=False)


@pytest.mark.parametrize("config", [GRID[i] for i in (4, 13, 17, 26, 38)], ids=config_id)
def test_two_hops_and_state_after_load(config: LoaderConfig) -> None:
    """SC11 and SC13: run 1 saves, run 2 resumes and saves (before and after iterating,
    through torch.save), run 3 resumes from run 2's state: both exact."""
    epochs = EPOCHS
    full = epochs_of(make(reference_wrapper, config), epochs)
    full_flat = flat(full)
    _, states, _ = states_along(reference_wrapper, config, 1)
    n0 = len(full[0])
    points = sorted({(0, k, False) for k in (1, n0 // 2, n0)} | {(0, n0, True)})
    for point in points:
        start = position(full, point)
        # Hop 2 before iterating: state_dict() right after load is the loaded position.
        loader = make(reference_wrapper, config)
        loader.load_state_dict(states[point])
        after_load = loader.state_dict()
        assert same(after_load, states[point])
        got = epochs_of(make_loaded(config, after_load), epochs + 1)
        assert_same_stream(
            flat(got)[: len(full_flat) - start], full_flat[start:], f"{point} via state after load"
        )
        # Run 2 iterates j batches (crossing a window boundary, or an epoch end), saves;
        # run 3 resumes from that.
        it = iter(loader)
        j = min(len(full_flat) - start, config.grad_acc_step + 1)
        taken = 0
        for _ in range(j):
            try:
                next(it)
                taken += 1
            except StopIteration:
                it = iter(loader)
        hop2 = roundtrip_torch(loader.state_dict())
        loader3 = make_loaded(config, hop2)
        rest3 = [b for _ in range(epochs + 1) for b in loader3]
        assert_same_stream(
            rest3[: len(full_flat) - start - taken], full_flat[start + taken :], f"{point} hop 2"
        )


def make_loaded(config: LoaderConfig, state: dict[str, Any]) -> Any:
    loader = make(reference_wrapper, config)
    loader.load_state_dict(state)
    return loader


@pytest.mark.parametrize("config", [GRID[12], GRID[13], GRID[27]], ids=config_id)
def test_state_survives_serialization(config: LoaderConfig) -> None:
    """SC17: torch.save + torch.load(weights_only=True), pickle and deepcopy all resume exactly."""
    full = epochs_of(make(reference_wrapper, config), EPOCHS)
    _, states, _ = states_along(reference_wrapper, config, 1)
    for point in [(0, 1, False), (0, len(full[0]), True)]:
        state = states[point]
        leaves = leaves_of(state)
        assert all(x is None or isinstance(x, (int, bool, torch.Tensor)) for x in leaves)
        assert any(isinstance(x, torch.Tensor) for x in leaves) == config.shuffle  # the generator state
        for name, roundtrip in [
            ("torch", roundtrip_torch),
            ("pickle", lambda s: pickle.loads(pickle.dumps(s))),
            ("deepcopy", copy.deepcopy),
        ]:
            restored = roundtrip(state)
            assert same(restored, state), name
            assert_resumes_exactly(reference_wrapper, config, full, point, restored)


def test_same_state_loads_into_several_loaders() -> None:
    config = GRID[27]
    full = epochs_of(make(reference_wrapper, config), EPOCHS)
    _, states, _ = states_along(reference_wrapper, config, 1)
    state = states[(0, 1, False)]
    for _ in range(3):
        assert_resumes_exactly(reference_wrapper, config, full, (0, 1, False), state)


def test_load_accepts_positional_and_keyword() -> None:
    config = LoaderConfig(dataset_size=6, batch_size=1, grad_acc_step=4)
    _, _, state = saved_after(1, config)
    a, b = make(reference_wrapper, config), make(reference_wrapper, config)
    a.load_state_dict(state)
    b.load_state_dict(state_dict=state)
    assert [x["index"].tolist() for x in a] == [x["index"].tolist() for x in b] == [[1], [2], [3], [4], [5]]


def test_iterator_detached_by_load_keeps_its_sequence() -> None:
    loader, it, state = saved_after(1, LoaderConfig(dataset_size=6, batch_size=1, grad_acc_step=2))
    next(it)
    loader.load_state_dict(state)
    assert [x["index"].tolist() for x in it] == [[2], [3], [4], [5]]
    assert [x["index"].tolist() for x in loader] == [[1], [2], [3], [4], [5]]


def test_refuses_bad_states() -> None:
    """SC40 (strict tier): bad states are refused at load time with a message naming the problem."""
    config = LoaderConfig(dataset_size=6, batch_size=1, grad_acc_step=3)
    _, _, good = saved_after(1, config)
    base_state = make(stateful_dataloader, config).state_dict()
    cases: list[tuple[Any, type[Exception], str]] = [
        (None, TypeError, "NoneType"),
        ("state", TypeError, "str"),
        ([good], TypeError, "list"),
        ({}, ValueError, "empty"),
        ({"foo": 1}, ValueError, "'foo'"),
        (
            {k: v for k, v in good.items() if k != "batches_yielded_in_window"},
            ValueError,
            "batches_yielded_in_window",
        ),
        ({**good, "extra": 1}, ValueError, "'extra'"),
        (base_state, ValueError, "bare base-loader state"),
        ({**good, "grad_acc_step": 2}, ValueError, "grad_acc_step=2"),
        ({**good, "batches_yielded_in_window": 3}, ValueError, "batches_yielded_in_window"),
        ({**good, "batches_yielded_in_window": True}, ValueError, "batches_yielded_in_window"),
        ({**good, "format_version": 99}, ValueError, "format_version"),
        ({**good, "base_state_at_window_start": {}}, ValueError, "base_state_at_window_start"),
    ]
    for bad, exc, words in cases:
        fresh = make(reference_wrapper, config)
        with pytest.raises(exc, match=words):
            fresh.load_state_dict(bad)
    # A well-formed state that does not fit this loader (2 of 3 batches of a window yielded,
    # but here the window has only 1 batch) is refused at the next iter(), not resumed
    # somewhere else.
    _, _, state = saved_after(2, config)
    assert state["batches_yielded_in_window"] == 2
    other = make(reference_wrapper, LoaderConfig(dataset_size=1, batch_size=1, grad_acc_step=3))
    other.load_state_dict(
        {**state, "base_state_at_window_start": other.state_dict()["base_state_at_window_start"]}
    )
    with pytest.raises(ValueError, match="has only 1"):
        iter(other)


# -- MindSpeed-MM's wrappers: known bad ----------------------------------------------------


def test_seed_positional_load_raises_type_error() -> None:
    """Bug 1 of MindSpeed-MM's bug report, the crash: the trainer's positional call."""
    config = LoaderConfig(dataset_size=8, batch_size=2, grad_acc_step=2)
    loader = make(mindspeed_wrapper, config)
    state = loader.state_dict()
    with pytest.raises(TypeError, match=r"takes 1 positional argument but 2 were given"):
        loader.load_state_dict(state)
    fixed = make(proposed_fix_wrapper, config)
    fixed.load_state_dict(state)  # the proposed fix removes the crash
    assert isinstance(loader, MindSpeedPrefetchGradAccDataLoader)
    assert isinstance(fixed, ProposedFixPrefetchGradAccDataLoader)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_seed_keyword_load_loses_the_rest_of_the_window(num_workers: int) -> None:
    """Bug 2: checkpoint after 1 batch of a 2-batch window; resume skips the window's 2nd batch."""
    config = LoaderConfig(dataset_size=8, batch_size=2, grad_acc_step=2, num_workers=num_workers)
    full = epochs_of(make(mindspeed_wrapper, config), 1)
    assert [b["index"].tolist() for b in full[0]] == [[0, 1], [2, 3], [4, 5], [6, 7]]

    loader = make(mindspeed_wrapper, config)
    it = iter(loader)
    assert next(it)["index"].tolist() == [0, 1]
    state = loader.state_dict()
    resumed = make(mindspeed_wrapper, config)
    resumed.load_state_dict(state_dict=state)
    resumed_batches = list(resumed)
    got = [b["index"].tolist() for b in resumed_batches]
    assert got == [[4, 5], [6, 7]]
    for _ in it:  # finish the epoch: the seed's suspended generator is a reference cycle
        pass  # that would keep the worker processes alive until the garbage collector runs
    lost = [b["index"].tolist() for b in full[0][1:] if b["index"].tolist() not in got]
    assert lost == [[2, 3]]  # batch 1 of epoch 0, samples 2 and 3, never seen again
    # Position by position the trainer also sees other window token counts: it expected
    # the rest of window 0 (count of batches 0+1) then window 1, and gets window 1 at once.
    expected_counts = [int(b[WINDOW_TOKEN_COUNT_KEY]) for b in full[0][1:3]]
    got_counts = [int(b[WINDOW_TOKEN_COUNT_KEY]) for b in resumed_batches]
    assert expected_counts[0] != got_counts[0]
    assert got_counts == [int(b[WINDOW_TOKEN_COUNT_KEY]) for b in full[0][2:4]]

    # The reference wrapper at the same point is exact.
    ref = make(reference_wrapper, config)
    it = iter(ref)
    next(it)
    ref_resumed = make_loaded(config, ref.state_dict())
    assert_same_stream(list(ref_resumed), full[0][1:], "reference at the seed's failing point")


@pytest.mark.parametrize(
    "config",
    [
        LoaderConfig(dataset_size=11, batch_size=2, grad_acc_step=3, shuffle=True, seed=5),
        LoaderConfig(
            dataset_size=8, batch_size=1, grad_acc_step=4, seed=6, generator="explicit", shuffle=True
        ),
        LoaderConfig(dataset_size=9, batch_size=2, grad_acc_step=2, drop_last=True, seed=7),
        LoaderConfig(dataset_size=3, batch_size=1, grad_acc_step=5, seed=8),
    ],
    ids=config_id,
)
@pytest.mark.parametrize("factory", [proposed_fix_wrapper, mindspeed_wrapper], ids=["seed_fix", "seed_kw"])
def test_seed_exact_at_window_boundaries_only(config: LoaderConfig, factory: Factory) -> None:
    """At a window boundary the base state is exact; mid-window exactly the window's rest is lost."""
    full = epochs_of(make(factory, config), EPOCHS)
    full_flat = flat(full)
    _, states, _ = states_along(factory, config, 2)
    mid_window_points = 0
    for key, state in states.items():
        loader = make(factory, config)
        if factory is mindspeed_wrapper:
            loader.load_state_dict(state_dict=state)  # the positional call crashes (bug 1)
        else:
            loader.load_state_dict(state)
        got = flat(epochs_of(loader, EPOCHS + 1))
        start = position(full, key)
        lost = 0
        if key != "fresh":
            assert isinstance(key, tuple)
            e, k, _ = key
            w_start, w_end = window_bounds(config, len(full[e]), k) if k < len(full[e]) else (k, k)
            if k != w_start:  # mid-window: the base loader already read up to the window's end
                lost = w_end - k
                mid_window_points += 1
        expected = full_flat[start + lost :]
        assert_same_stream(got[: len(expected)], expected, f"{factory.__name__} at {key} (lost {lost})")
        if lost:
            assert not same(got[:lost], full_flat[start : start + lost])
    assert mid_window_points > 0


def test_seed_fix_ignores_none_silently() -> None:
    """The proposed fix accepts load_state_dict(None) and restarts from scratch (fails SC40)."""
    config = LoaderConfig(dataset_size=4, batch_size=1, grad_acc_step=2)
    loader = make(proposed_fix_wrapper, config)
    loader.load_state_dict(None)
    assert [b["index"].tolist() for b in loader] == [[0], [1], [2], [3]]


def test_a_state_taken_from_a_resumed_distributed_loader_resumes_exactly() -> None:
    """Regression (found by SC30 on 2 ranks): the window start after a resume is the loaded state.

    torchdata's StatefulDistributedSampler reports the epoch's start in a state taken
    after load_state_dict + iter() and before the first next(); the wrapper used to ask
    for exactly that state and resumed with the epoch's first batches repeated.
    """
    from stateful_contract import LoaderConfig
    from stateful_contract.reference.factories import reference_wrapper
    from stateful_contract.repro import Position, checkpoint, epoch_lengths, fresh, take

    config = LoaderConfig(dataset_size=5, batch_size=1, grad_acc_step=2, world_size=2)
    reference, _ = epoch_lengths(fresh(reference_wrapper, config), epochs=3)
    state = checkpoint(fresh(reference_wrapper, config), Position(0, 0))
    for hop in (2, 1):
        loader = fresh(reference_wrapper, config, state=state)
        take(loader, hop, max_epochs=4)
        state = loader.state_dict()
    resumed = take(fresh(reference_wrapper, config, state=state), 5, max_epochs=4)
    assert [b["index"].tolist() for b in resumed] == [b["index"].tolist() for b in reference[3:8]]


# --- the set_epoch loop through the wrapper (F12) -----------------------------------------------

#: Rank 0 of 2: 3 batches per epoch, windows of 2 and a short last window of 1.
SHORT_LAST_WINDOW = LoaderConfig(dataset_size=6, batch_size=1, grad_acc_step=2, world_size=2)


def _trainer_loop(loader: Any, start: int, stop: int) -> dict[int, list[list[int]]]:
    out = {}
    for epoch in range(start, stop):
        loader.batch_sampler.set_epoch(epoch)  # the base loader's, reached through the wrapper
        out[epoch] = [b["index"].tolist() for b in loader]
    return out


def test_a_state_after_a_short_last_window_gives_way_to_the_next_set_epoch() -> None:
    full = _trainer_loop(reference_wrapper(SHORT_LAST_WINDOW), 0, 3)
    saved = reference_wrapper(SHORT_LAST_WINDOW)
    saved.batch_sampler.set_epoch(0)
    it = iter(saved)
    for _ in range(3):  # epoch 0's last batch, before its StopIteration
        next(it)
    resumed = reference_wrapper(SHORT_LAST_WINDOW)
    resumed.load_state_dict(saved.state_dict())
    assert _trainer_loop(resumed, 1, 3) == {1: full[1], 2: full[2]}  # epoch 1 was lost before (F12)
    # Without set_epoch the same state resumes as torchdata's loader does: the empty rest of epoch 0.
    again = reference_wrapper(SHORT_LAST_WINDOW)
    again.load_state_dict(saved.state_dict())
    assert [b["index"].tolist() for b in again] == []


def rank_0_of_2(config: LoaderConfig) -> Any:
    """The wrapper as rank 0 of 2 sees it, in one process: its base has a ``set_epoch`` batch sampler."""
    return reference_wrapper(dataclasses.replace(config, rank=0, world_size=2))


def test_the_wrapper_over_a_set_epoch_sampler_passes_the_set_epoch_loop() -> None:
    from stateful_contract import ConfigSpace, check

    report = check(rank_0_of_2, clauses=["SC21"], space=ConfigSpace(num_workers=(0,)))
    assert report["SC21"].status == "passed", report["SC21"].message


# -- cyclic mode (MindSpeed-MM's default): one endless iter(), windows spanning epochs ----------------------


def cyclic_wrapper(config: LoaderConfig) -> PrefetchGradAccDataLoader:
    return PrefetchGradAccDataLoader(config.stateful_dataloader(), config.grad_acc_step, cyclic=True)


def first(loader: Any, n: int) -> list[Batch]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


CYCLIC_CONFIGS = [
    LoaderConfig(dataset_size=5, batch_size=1, grad_acc_step=2),  # 5 batches an epoch: every other window spans two
    LoaderConfig(dataset_size=7, batch_size=2, shuffle=True, seed=3, grad_acc_step=3, generator="explicit"),
    LoaderConfig(dataset_size=6, batch_size=2, shuffle=True, seed=5, drop_last=True, grad_acc_step=4),
    LoaderConfig(dataset_size=5, batch_size=2, shuffle=True, seed=7, num_workers=2, persistent_workers=True,
                 grad_acc_step=2, generator="explicit"),
]


@pytest.mark.parametrize("config", CYCLIC_CONFIGS, ids=config_id)
def test_cyclic_mode_is_the_base_passes_end_to_end_and_resumes_exactly_everywhere(config: LoaderConfig) -> None:
    """By hand against torchdata: the cyclic stream is the base loader's passes one after the other, each
    window's token count over its own batches (across an epoch boundary too), and a state taken after any
    number of batches resumes that stream exactly."""
    epochs = 3
    base = flat(epochs_of(make(stateful_dataloader, config), epochs))
    stream = first(make(cyclic_wrapper, config), len(base))
    assert [b["index"].tolist() for b in stream] == [b["index"].tolist() for b in base]
    g = config.grad_acc_step
    for start in range(0, len(base) - g + 1, g):
        window = base[start:start + g]
        count = sum(int((b["labels"] > -100).sum()) for b in window)
        assert all(int(b[WINDOW_TOKEN_COUNT_KEY]) == count for b in stream[start:start + g]), start
    ahead = 2 * g + 1
    for k in range(len(base) - ahead):
        loader = make(cyclic_wrapper, config)
        it = iter(loader)
        for _ in range(k):
            next(it)
        state = roundtrip_torch(loader.state_dict())
        resumed = make(cyclic_wrapper, config)
        resumed.load_state_dict(state)
        assert_same_stream(first(resumed, ahead), stream[k:k + ahead], f"cyclic, state after {k} batches")
