"""A correct loader whose state names the temporary directory its data lives in, as litdata's ``input_dir``
and a dataset cache under ``tempfile.gettempdir()`` do, and which refuses a state from another directory.

A real job's restart runs with the TMPDIR the saving job had (the same machine, the same environment), so this
loader resumes there. Imported by path (``tests/tmpdir_loaders.py:records_its_tmpdir``) by the command line, the
supervised children and every rank (tests/isolation/test_one_tmpdir.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

from stateful_contract import LoaderConfig


class RecordsItsTmpdir:
    """``config.stateful_dataloader()``, its state with the temporary directory this process sees."""

    def __init__(self, config: LoaderConfig) -> None:
        self.inner = config.stateful_dataloader()
        self.where = tempfile.gettempdir()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)

    def state_dict(self) -> dict[str, Any]:
        return {"inner": self.inner.state_dict(), "where": self.where}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["where"] != self.where:
            raise ValueError(f"this state's data is in {state['where']}, and this process's is in {self.where}")
        self.inner.load_state_dict(state["inner"])


def records_its_tmpdir(config: LoaderConfig) -> RecordsItsTmpdir:
    return RecordsItsTmpdir(config)
