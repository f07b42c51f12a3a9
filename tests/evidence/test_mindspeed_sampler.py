"""MindSpeed-MM's consumed-samples batch sampler gets the contract's verdicts: an uneven deal fails SC32, too
few samples is reported as the exception it raises (finding F33 in docs/findings.md).

Upstream's ``BaseRandomBatchSampler`` (modelled by `tests.mindspeed_production.ConsumedSamplesBatchSampler`)
deals 9 samples on 2 ranks as 5 batches and 4: SC32 must fail on that, naming the counts and the step every
collective waits at. With fewer samples than micro-batch x ranks it raises ``ZeroDivisionError`` at the first
``next()``: the report must name that exception, where the loader raised it, and not call it a difference
between two fresh loaders. The reproduction itself runs in tests/evidence/test_findings.py.
"""

from __future__ import annotations

import sys

import pytest

from stateful_contract import LoaderConfig, check
from stateful_contract.faces.distributed import check_world
from stateful_contract.repro import Position
from tests.mindspeed_production import ConsumedSamplesBatchSampler

TARGET = "tests.mindspeed_production:production_loader"

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")


def test_the_model_deals_as_upstream_does_uneven_batches_and_counters_that_disagree() -> None:
    # sampler.py at 57069cd5: rank r takes order[offset:][r::num_replicas] of total // micro * micro indices.
    dealt = {}
    for rank in (0, 1):
        sampler = ConsumedSamplesBatchSampler(9, 1, num_replicas=2, rank=rank, shuffle=False)
        dealt[rank] = ([b[0] for b in sampler], sampler.consumed_samples, [b[0] for b in sampler])
    assert dealt[0] == ([0, 2, 4, 6, 8], 10, [2, 4, 6, 8])
    assert dealt[1] == ([1, 3, 5, 7], 8, [1, 3, 5, 7])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")
def test_sc32_fails_on_2_ranks_with_the_rank_counts_and_the_step_that_hangs() -> None:
    report = check_world(TARGET, world_size=2, clauses=["SC32"],
                         replay=(LoaderConfig(dataset_size=9, batch_size=1), Position(epoch=0, batches=1)))
    sc32 = report["SC32"]
    assert sc32.status == "failed", sc32.message
    assert "in epoch 0, rank 0 yielded 5 batches, rank 1 yielded 4 batches" in sc32.got, sc32.got
    assert sc32.impact is not None
    assert sc32.impact.describe() == "loud: rank 1 has no batch at step 5: every collective waits"
    assert "rank=1, world_size=2" in sc32.reproduction


def test_a_dataset_below_one_global_batch_is_reported_as_the_loaders_zero_division() -> None:
    report = check(TARGET, replay=(LoaderConfig(dataset_size=1, batch_size=2), Position(epoch=0, batches=0)))
    assert not report.passed
    sc18 = report["SC18"]
    assert sc18.status == "failed"
    assert "raised ZeroDivisionError: integer division or modulo by zero" in sc18.got, sc18.got
    assert "mindspeed_production.py" in sc18.got  # where the loader raised it
    assert "differ" not in sc18.got
    for result in report.results:
        if result.status == "not-judged":
            assert "ZeroDivisionError" in result.message and "differ" not in result.message, result.message
