"""Coverage counts only real checkpoints: SC20's ``used`` position (how far the loader the state is loaded into
had run) is where no state is taken, and a report that counted it claimed twice the checkpoints SC20 took."""

from __future__ import annotations

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.clauses.trainer import Reload
from stateful_contract.repro.steps import Position
from stateful_contract.search.coverage import POINT_PREFIX, POINTS, coverage_of, describe_coverage


def _checkpoints(counts: dict[str, int]) -> int:
    return sum(counts.get(kind, 0) for kind in POINTS)


def test_a_reload_plan_counts_its_checkpoint_and_not_where_the_loader_had_run() -> None:
    config = LoaderConfig(dataset_size=8, batch_size=2)
    # The state is taken mid-epoch 0; the loader it is loaded into had run to the end of epoch 1.
    counts = coverage_of(config, Reload(Position(0, 1), used=Position(1, 4)), [4, 4, 4, 4])
    assert _checkpoints(counts) == 1, counts
    assert counts["window-boundary"] == 1 and not counts.get("epoch-end"), counts
    assert [k for k in counts if k.startswith(POINT_PREFIX)] == [f"{POINT_PREFIX}w0/e0/window-boundary/h0"]


def test_sc20s_report_counts_one_checkpoint_per_example() -> None:
    result = check("zoo:epoch_loader", clauses=["SC20"], profile="ci", space=ConfigSpace(num_workers=(0,)), jobs=1,
                   isolation="in-process")["SC20"]
    assert result.status == "passed", result.message
    # One state per example that ran (an example Hypothesis drew but could not finish drawing runs nothing):
    # counting the used position too gave about two per example.
    assert result.examples > 10 and result.examples // 2 < _checkpoints(result.coverage) <= result.examples, (
        result.examples, result.coverage)


def test_the_summary_counts_in_the_number_each_count_takes() -> None:
    # A run that hopped once (SC11 under -k, a short dev search) read "1 hops" in the summary.
    assert describe_coverage({"mid-window": 1, "with-workers": 1, "hops": 1}) == (
        "checkpoints 1 mid-window; 1 example with workers; 1 hop")
    assert describe_coverage({"mid-window": 2, "with-workers": 2, "hops": 2}) == (
        "checkpoints 2 mid-window; 2 examples with workers; 2 hops")
