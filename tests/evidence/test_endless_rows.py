"""The endless and one-ahead rows of the matrix (tests/compat/titan_infinite.py, accel.py): their passes mean
something. torchtitan's ``infinite=True`` model passes as a declared endless stream (the row, run by
tests/evidence/test_compat.py); the same model with the epoch left out of its state (a checkpoint from before torchtitan
saved it: ``load_state_dict`` then defaults to epoch 0) must fail SC10, or the row's pass judged nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from stateful_contract import ConfigSpace, LoaderConfig, check
from tests.compat.titan_infinite import InfiniteTextDataset, RankKeyed, torchtitan_infinite_map

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


class EpochNotSaved(InfiniteTextDataset):
    """The state without ``epoch``: a resume after the first reloop replays epoch 0's order from ``sample_idx``."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        del state["epoch"]
        return state


def epoch_not_saved(config: LoaderConfig) -> RankKeyed:
    return RankKeyed(EpochNotSaved(config.dataset, list(range(config.dataset_size))), dp_rank=0, dp_world_size=1,
                     batch_size=config.batch_size, snapshot_every_n_steps=1)


def test_the_model_loops_without_end_and_reshuffles_every_reloop() -> None:
    loader = torchtitan_infinite_map(LoaderConfig(dataset_size=4, batch_size=2))
    batches = iter(loader)
    seen = [next(batches)["index"].tolist() for _ in range(6)]  # three epochs of two batches
    assert sorted(seen[0] + seen[1]) == sorted(seen[2] + seen[3]) == sorted(seen[4] + seen[5]) == [0, 1, 2, 3]
    assert seen[0] + seen[1] == [0, 1, 2, 3] and [seen[2] + seen[3], seen[4] + seen[5]] != [[0, 1, 2, 3]] * 2


def test_the_same_model_without_the_epoch_in_its_state_fails_sc10() -> None:
    report = check(epoch_not_saved, clauses=["SC10"], endless=True, space=ConfigSpace(num_workers=(0,), dataset_size=(3, 12)))
    sc10 = report["SC10"]
    assert sc10.status == "failed", sc10.message
