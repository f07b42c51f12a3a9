"""Loaders correct only under a declared trainer policy (docs/clauses.md, "Checkpoint policies").

`EpochEndOnly` saves only where torchtune's recipes save, at epoch ends: its state is the number of
finished epochs (torchtune's ``epochs_run``), so it resumes exactly after a pass's ``StopIteration``
(and before the first ``iter()``) and replays the epoch from its start anywhere else. The contract
fails it without a declaration and passes it with ``--checkpoint-alignment epoch``.

Imported by its plain name (``tests/`` is on ``sys.path``, conftest.py), as the zoo is.
"""

from __future__ import annotations

from typing import Any

from zoo import SetEpochLoader

from stateful_contract import LoaderConfig

__all__ = ["EpochEndOnly", "epoch_end_only"]


class EpochEndOnly(SetEpochLoader):
    """The zoo's correct `SetEpochLoader` whose state keeps the epoch and drops the offset within it: the
    offset after ``StopIteration`` is 0, so that state is exact; a state taken inside an epoch resumes at
    that epoch's first batch."""

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": 0}


def epoch_end_only(config: LoaderConfig) -> EpochEndOnly:
    return EpochEndOnly(config)

