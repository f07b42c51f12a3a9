"""A declared consumption's state waits for the pipeline's threads, not for multiprocessing's own.

A worker loader's queues each start a feeder thread that lives as long as the queue: the state waited the
whole `SETTLE` for each (4 s per worker loader of 2 workers) before learning it was long-lived, and a dev
check of torchdata's own loader drawn through an identity consumption took 12 times as long as without it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from stateful_contract import LoaderConfig
from stateful_contract.repro import drawn_through

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def _loader(config: LoaderConfig) -> Any:
    return config.stateful_dataloader()


def _as_is(loader: Any) -> Iterator[Any]:
    return iter(loader)


def test_a_worker_loaders_queue_threads_are_not_waited_for() -> None:
    drawn = drawn_through(_loader, _as_is)(LoaderConfig(dataset_size=6, batch_size=1, num_workers=2))
    it = iter(drawn)
    next(it)
    feeders = [t for t in threading.enumerate() if t.name == "QueueFeederThread"]
    assert feeders, "the worker loader started no queue feeder thread: this test no longer tests anything"
    assert not set(feeders) & drawn._started
    drawn.state_dict()
    assert not drawn._long_lived  # none was waited out as a long-lived producer
    del it


def test_threads_the_pipeline_starts_are_still_waited_for() -> None:
    done = threading.Event()

    def fetch_ahead(loader: Any) -> Iterator[Any]:
        inner = iter(loader)

        class Ahead:
            def __iter__(self) -> Any:
                return self

            def __next__(self) -> Any:
                batch = next(inner)
                threading.Thread(target=lambda: (threading.Event().wait(0.2), done.set())).start()
                return batch

        return Ahead()

    drawn = drawn_through(_loader, fetch_ahead)(LoaderConfig(dataset_size=4, batch_size=1))
    next(iter(drawn))
    drawn.state_dict()
    assert done.is_set()  # the state was taken once the thread the pipeline started had finished
