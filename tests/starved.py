"""A correct loader that does a little CPU work per batch, for checks run starved of CPU.

Imported by path (``tests/starved.py:busy_per_batch``) by the CLI, its supervised child and every rank. Each
call of the factory appends its process's pid to the file ``$STARVED_MARK`` (when set): the test starves
those processes (and their workers) from outside, as a busy machine would, but not the checker's own start-up.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

from stateful_contract import LoaderConfig

#: CPU seconds each batch costs (a tokenizer, a decoder): a little, but starved at 1-2 % of a core, an
#: example of a few passes takes seconds of wall time.
CPU_PER_BATCH = 0.004


def burn(seconds: float) -> None:
    """Spend ``seconds`` of this process's CPU time."""
    started = time.process_time()
    while time.process_time() - started < seconds:
        pass


class BusyPerBatch:
    """torchdata's `StatefulDataLoader` for the config, with `CPU_PER_BATCH` of work per batch: correct."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader()

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.base)
        return self._busy(it)

    @staticmethod
    def _busy(it: Iterator[Any]) -> Iterator[Any]:
        for batch in it:
            burn(CPU_PER_BATCH)
            yield batch

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


def busy_per_batch(config: LoaderConfig) -> BusyPerBatch:
    if mark := os.environ.get("STARVED_MARK"):
        with open(mark, "a", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    return BusyPerBatch(config)
