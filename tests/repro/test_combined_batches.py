"""A batch of several loaders' batches by name (Lightning's CombinedLoader) is counted by its samples, each named by
its loader: before, a resume that cut the epoch short read as "batches lost" and, in the same message, as batches
"the uninterrupted run never yields in this epoch (drop_last's tail ...), not the resume's"."""

from __future__ import annotations

import pytest
import torch
from combined_loaders import BatchIdxRestartsAtResume, MaxSizeCycleForgetsWhoRanOut

from stateful_contract import ConfigSpace, check
from stateful_contract.repro.compare import batch_ids, describe_batch, sample_ids

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def test_a_batch_of_named_batches_has_the_samples_of_each_named_by_its_loader() -> None:
    combined = {"a": {"index": torch.tensor([3, 1])}, "b": {"index": torch.tensor([3])}}
    assert batch_ids(combined) == [("a", 3), ("a", 1), ("b", 3)]
    assert batch_ids({"a": None, "b": {"index": [2, -1]}}) == [("b", 2)]  # ran out (max_size); padding
    assert batch_ids({"task": {"x": {"index": 0}}}) == [("task", "x", 0)]
    assert describe_batch(combined) == "batch of samples [('a', 3), ('a', 1), ('b', 3)]"
    # The clauses that count the config's samples leave such ids out, as they do a batch without an index.
    assert sample_ids([combined], integers=True) is None


def test_a_mapping_of_fields_is_one_batch_not_a_combination() -> None:
    assert batch_ids({"input_ids": torch.zeros(2, 3), "meta": {"index": [0, 1]}}) is None
    assert batch_ids({"a": {"index": [0]}, "mask": torch.ones(1)}) is None
    assert batch_ids({"a": None}) is None
    assert batch_ids({"index": [4, 5], "nested": {"index": [0]}}) == [4, 5]


def test_a_combined_loader_that_forgets_who_ran_out_loses_samples_by_name() -> None:
    result = check(MaxSizeCycleForgetsWhoRanOut, clauses=["SC10"], profile="dev", seed=0,
                   space=ConfigSpace(num_workers=(0,)))["SC10"]
    assert result.status == "failed", result.message
    assert result.impact is not None
    assert result.impact.unit == "sample", result.impact
    assert "drop_last" not in result.message, result.message
    assert "('short', " in result.message or "('long', " in result.message, result.message


def test_a_batch_whose_counter_restarts_reads_as_changed_contents_not_as_lost_and_never_yielded() -> None:
    """Lightning's (batch, batch_idx, dataloader_idx) after a resume: the same samples, batch_idx from 0. Counted in
    whole batches, each was "lost" and, in the same message, "never yielded (drop_last's tail), not the resume's"."""
    result = check(BatchIdxRestartsAtResume, clauses=["SC10"], profile="dev", seed=0,
                   space=ConfigSpace(num_workers=(0,)))["SC10"]
    assert result.status == "failed", result.message
    assert result.impact is not None and result.impact.unit == "batch", result.impact
    assert set(result.impact.counts) == {"changed"}, result.impact
    assert result.impact.what.startswith("batch contents changed"), result.impact
    assert "drop_last" not in result.message, result.message

