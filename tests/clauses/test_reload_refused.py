"""SC20 on a loader that refuses a load once it has iterated: the rule Lightning's fit loop lives by.

Lightning restores a loader's state right after building it and before its first ``iter()``
(``src/lightning/pytorch/loops/fit_loop.py`` at Lightning-AI/pytorch-lightning
4ccc50fe51a451bc18e80b4e28bcb6b0ac912a3f: ``setup_data`` calls ``_load_combined_loader_states()``, then
``iter(self._data_fetcher)``), so a loader that raises on a later load never fails a Lightning run; it
crashes a trainer that reloads into the loader it has (a rollback, a retry). SC20 fails it, loud, and the
message says where the loader had been, which trainers it costs and how one that never reloads declares it.
"""

from __future__ import annotations

from typing import Any

import pytest
from zoo import EpochLoader

from stateful_contract import ConfigSpace, check

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

IN_PROCESS = ConfigSpace(num_workers=(0,))


class LoadsOnlyBeforeIter(EpochLoader):
    """Correct for a trainer that loads into a freshly built loader; raises on a load after an ``iter()``."""

    iterated = False

    def __iter__(self) -> Any:
        self.iterated = True
        return super().__iter__()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.iterated:
            raise RuntimeError("load_state_dict() must be called before iterating the loader")
        super().load_state_dict(state_dict)


def test_a_refused_reload_says_where_whom_it_costs_and_how_to_declare_it() -> None:
    result = check(LoadsOnlyBeforeIter, clauses=["SC20"], profile="dev", seed=0, space=IN_PROCESS)["SC20"]
    assert result.status == "failed"
    assert result.impact is not None and result.impact.kind == "loud"
    message = result.message
    assert "Checkpoint: state taken" in message and "loaded into a loader that had already been iterated" in message
    assert "RuntimeError: load_state_dict() must be called before iterating the loader" in message
    assert "a trainer that reloads into the loader it has stops here" in message
    assert 'expected_failures={"SC20": "loads only into a freshly built loader"}' in message  # the Python face


def test_the_declaration_the_message_offers_is_accepted() -> None:
    report = check(LoadsOnlyBeforeIter, clauses=["SC20"], profile="dev", seed=0, space=IN_PROCESS,
                   expected_failures={"SC20": "loads only into a freshly built loader"})
    assert report["SC20"].status == "expected-failure"
