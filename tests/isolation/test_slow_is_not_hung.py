"""A loader slower than the example timeout is not judged; only one that stops answering is called hung.

The example timeout bounds an example's time, but a hang is a loader that stops answering: one call into it
that never returns. A correct loader reading 0.05 s a batch (0.2 s from remote storage is common) runs past a
short timeout on a long example while every call returns: failing it as "hangs: the job stops" would tell
its user of a harm their training run never meets (docs/supervision.md, "Slow is not hung")."""

from __future__ import annotations

import time
from typing import Any

import pytest
from zoo import EpochLoader, HangsOnResume

from stateful_contract import ConfigSpace, check
from stateful_contract.repro.guard import LoaderHung, LoaderSlow, answered, can_interrupt, deadline

pytestmark = pytest.mark.skipif(not can_interrupt(), reason="SIGALRM timers: POSIX main thread only")

#: Examples long enough to outlast the timeout at `SlowButCorrect`'s pace: 20 to 24 samples, one a batch.
LONG = ConfigSpace(num_workers=(0,), dataset_size=(20, 24), batch_size=(1, 1), grad_acc_step=(1, 1))


class SlowButCorrect(EpochLoader):
    """Resumes exactly, 0.05 s a batch: about 6 s for SC10's longest example, over a 1 s timeout."""

    def __iter__(self) -> Any:
        for batch in super().__iter__():
            time.sleep(0.05)
            yield batch


def test_a_loop_that_keeps_answering_is_slow_and_one_that_stops_is_hung() -> None:
    with pytest.raises(LoaderSlow):
        with deadline(0.5):
            while True:
                answered()
                time.sleep(0.01)
    with pytest.raises(LoaderHung) as hung:
        with deadline(0.5):
            answered()
            time.sleep(5)
    assert not isinstance(hung.value, LoaderSlow)


def sc10(loader: Any, isolation: str) -> Any:
    """SC10's result for ``loader`` on examples long enough to outlast a 1 s timeout."""
    return check(loader, clauses=["SC10"], timeout=1, space=LONG, profile="dev",
                 isolation=isolation)["SC10"]  # type: ignore[arg-type]


@pytest.mark.parametrize("isolation", ["in-process", "supervised"])
def test_a_correct_loader_slower_than_the_timeout_is_not_judged_never_failed(isolation: str) -> None:
    result = sc10(SlowButCorrect, isolation)
    assert result.status == "not-judged", result.message
    assert "kept answering" in result.detail and "timeout" in result.detail, result.detail
    assert result.killed_by == ""


@pytest.mark.parametrize("isolation", ["in-process", "supervised"])
def test_a_loader_that_stops_answering_still_fails_as_hung(isolation: str) -> None:
    result = sc10(HangsOnResume, isolation)
    assert result.status == "failed", result.message
    assert result.killed_by == "timeout"
    assert "hangs: the job stops" in str(result.impact), result.impact
