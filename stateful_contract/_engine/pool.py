"""The worker configurations of a check: one pool, shared by every clause's worker examples.

A worker example's cost is its loaders' worker processes: each epoch of a loader without
persistent workers forks them again (0.1 to 0.3 s on 2 cores). The uninterrupted run an
example compares with is four such epochs, and it is taken once per configuration and
check (`stateful_contract._engine.steps.uninterrupted`). Configurations drawn freely by
every clause almost never repeat, so each worker example paid for its own uninterrupted
run; drawn from one pool they repeat across clauses, and each pool configuration's run
is taken once per check, while every clause still draws its own plans (checkpoint points,
hops) on it. The pool is built so that the points where worker bugs show are there: both
worker counts, persistent workers and not, and epochs with an odd number of batches (a
checkpoint after a batch count the worker count does not divide; `plans.draw_position`
asks for one half the time).

The uninterrupted run is still the loader's own, taken in the same process the example
runs in; a loader whose fresh instances differ is SC18's to find (it compares two fresh
loaders of its own, never a kept run).
"""

from __future__ import annotations

import functools
import random

from hypothesis import strategies as st

from ..config import ConfigSpace, LoaderConfig

__all__ = ["POOL_SIZE", "worker_configs", "worker_pool"]

#: Configurations in the pool at least (a search of n worker examples per clause has 2n): each meets many clauses.
POOL_SIZE = 24
#: Batches per epoch of a pool configuration, at most.
MAX_BATCHES = 6
#: The pool of a derandomized run (ci) is always this one.
DERANDOMIZED = 0


def _batches(size: int, batch: int, drop_last: bool) -> int:
    return size // batch if drop_last else -(-size // batch)


@functools.lru_cache(maxsize=8)
def worker_pool(space: ConfigSpace, size: int = POOL_SIZE, seed: int = DERANDOMIZED) -> tuple[LoaderConfig, ...]:
    """``size`` configurations with workers from ``space``, simplest first (Hypothesis shrinks
    towards the first), the same for every call with the same arguments."""
    counts = sorted(n for n in space.num_workers if n > 0)
    if not counts:
        return ()
    rng = random.Random(seed)
    pool = []
    for i in range(size):
        workers = counts[i % len(counts)]
        batch = rng.randint(*space.batch_size)
        drop_last = rng.random() < 0.3
        # At most `MAX_BATCHES` batches an epoch: every batch crosses a process boundary, and an
        # example iterates up to ten epochs; worker-count offsets show in short epochs as well.
        sizes = [n for n in range(space.dataset_size[0], space.dataset_size[1] + 1)
                 if _batches(n, batch, drop_last) <= MAX_BATCHES] or [space.dataset_size[0]]
        # Half the pool: epochs of an odd number (3 or more) of batches, which no worker count
        # above one divides, where the space allows it.
        odd = [n for n in sizes if _batches(n, batch, drop_last) % 2 == 1 and _batches(n, batch, drop_last) >= 3]
        dataset_size = rng.choice(odd if i % 4 < 2 and odd else sizes)
        pool.append(LoaderConfig(
            # Every worker count meets every combination of persistent workers and shuffling.
            dataset_size=dataset_size, batch_size=batch, shuffle=(i // (2 * len(counts))) % 2 == 1,
            generator=rng.choice(["default", "explicit"]), seed=rng.randint(0, 2**16), drop_last=drop_last,
            num_workers=workers, persistent_workers=(i // len(counts)) % 2 == 1,
            grad_acc_step=rng.randint(*space.grad_acc_step)))
    return tuple(sorted(pool, key=lambda c: (c.num_workers, c.persistent_workers, c.dataset_size, c.batch_size,
                                             c.grad_acc_step, c.shuffle, c.drop_last, c.generator, c.seed)))


def worker_configs(space: ConfigSpace, examples: int, seed: int | None) -> st.SearchStrategy[LoaderConfig]:
    """The strategy the worker examples of a check draw from: its pool (empty without workers)."""
    pool = worker_pool(space, max(POOL_SIZE, 2 * examples), DERANDOMIZED if seed is None else seed)
    return st.sampled_from(pool) if pool else st.nothing()
