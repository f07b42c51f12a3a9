"""Packed batches: an ``index`` padded with a negative fill counts its samples, not its padding."""

from __future__ import annotations

import pytest
import torch
from packed_loaders import PackedRows, PackedRowsSkipABatch

from stateful_contract import ConfigSpace, check
from stateful_contract.repro.compare import batch_ids, sample_ids

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

IN_PROCESS = ConfigSpace(num_workers=(0,), batch_size=(1, 1))


def test_a_negative_index_is_padding_not_a_sample() -> None:
    row = {"index": torch.tensor([3, 0, -1, -1]), "input_ids": torch.zeros(4, 2)}
    assert batch_ids(row) == [3, 0]
    assert batch_ids({"index": [-100, 5]}) == [5]
    assert sample_ids([row, {"index": torch.tensor([[2, -1], [1, -1]])}], integers=True) == [3, 0, 2, 1]


@pytest.mark.acceptance  # a whole dev search (8 s): the README's command stays under 7 minutes on 2 cores
def test_a_correct_packing_loader_is_judged_by_its_samples_and_passes() -> None:
    """Before, SC42 took the pad -1 for a sample of a dataset of the loader's own and judged nothing."""
    report = check(PackedRows, clauses=["SC10", "SC42"], strict=True, profile="dev", seed=0, space=IN_PROCESS)
    assert report["SC10"].status == "passed", report["SC10"].message
    assert report["SC42"].status == "passed", report["SC42"].message


def test_a_lost_packed_row_counts_its_sample_not_the_row_width() -> None:
    """One batch of one sample skipped: "1 sample lost", where the pads made it 8."""
    result = check(PackedRowsSkipABatch, clauses=["SC10"], profile="dev", seed=0, space=IN_PROCESS)["SC10"]
    assert result.status == "failed"
    assert result.impact is not None
    assert "1 sample lost" in str(result.impact), result.impact
