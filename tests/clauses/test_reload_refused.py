"""SC20 on a loader that refuses a load once it has iterated: the rule Lightning's fit loop lives by.

Lightning restores a loader's state right after building it and before its first ``iter()``
(``src/lightning/pytorch/loops/fit_loop.py`` at Lightning-AI/pytorch-lightning
4ccc50fe51a451bc18e80b4e28bcb6b0ac912a3f: ``setup_data`` calls ``_load_combined_loader_states()``, then
``iter(self._data_fetcher)``), so a loader that raises on a later load never fails a Lightning run; it
crashes a trainer that reloads into the loader it has (a rollback, a retry). SC20 fails it, loud, and the
message says where the loader had been, which trainers it costs and how one that never reloads declares it:
``trainer_shape="loads-fresh"``. Declared, SC20 is not judged, with the reason (not passed: nothing checked a
reload), and every other clause still judges: the declaration hides no other bug.
"""

from __future__ import annotations

from typing import Any

import pytest
from zoo import EpochLoader, LazyNewPass, OffByOneResume

from stateful_contract import ConfigSpace, Report, check

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
    assert 'check(..., trainer_shape="loads-fresh")' in message  # the Python face


def test_declared_a_trainer_that_loads_only_into_fresh_loaders_sc20_is_not_judged_and_says_why() -> None:
    report = check(LoadsOnlyBeforeIter, clauses=["SC13", "SC20"], profile="dev", seed=0, space=IN_PROCESS,
                   trainer_shape="loads-fresh")
    sc20 = report["SC20"]
    assert sc20.status == "not-judged"  # never "passed": no reload was checked
    assert sc20.message == ("does not apply: your trainer loads a checkpoint only into a freshly built loader, "
                            "before its first iter(), and never reloads into one it has iterated (no rollback "
                            "or retry into the same object) (declared)")
    assert report["SC13"].status == "passed"  # the other clauses judge as ever
    assert report.verdict == "pass"
    assert any(n.startswith("declared: the trainer's shape is loads-fresh") for n in report.notes)
    assert Report.from_dict(report.to_dict()).trainer_shape == ["loads-fresh"]  # the JSON, and so the badge


class RefusesReloadAndResumesLate(LoadsOnlyBeforeIter, OffByOneResume):
    """The Lightning rule, and a resume one batch late (SC10): a fresh-loader trainer loses that batch."""


class RefusesReloadAndStartsPassesLazily(LoadsOnlyBeforeIter, LazyNewPass):
    """The Lightning rule, and a new pass that starts only at its first batch (SC22)."""


@pytest.mark.parametrize("loader, broken", [(RefusesReloadAndResumesLate, "SC10"),
                                            (RefusesReloadAndStartsPassesLazily, "SC22")])
def test_the_declaration_hides_no_other_bug(loader: type[EpochLoader], broken: str) -> None:
    report = check(loader, clauses=[broken, "SC20"], profile="dev", seed=0, space=IN_PROCESS,
                   isolation="in-process", trainer_shape="loads-fresh")
    assert report[broken].status == "failed", report[broken].message
    assert report["SC20"].status == "not-judged"
    assert report.verdict == "fail"
