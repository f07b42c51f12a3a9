"""Clauses judged in parallel jobs, the share of the checkpoint space a search visits, the worker pool."""

from __future__ import annotations

from dataclasses import replace

import misbehaving
import torch
import zoo

from stateful_contract import ConfigSpace, check
from stateful_contract.config import LoaderConfig
from stateful_contract.report.render import coverage_line
from stateful_contract.repro.steps import Position
from stateful_contract.search.coverage import coverage_of, describe_space, space_points
from stateful_contract.search.loop import worker_pool
from stateful_contract.search.plans import Checkpoint, Hops

IN_PROCESS = ConfigSpace(num_workers=(0,))


def _verdicts(report):  # type: ignore[no-untyped-def]
    """Everything a clause's record says but its time (and the notes, where the speed-up is noted)."""
    return [(r.id, r.status, r.examples, r.plan, r.config, r.coverage, r.message, r.got, r.reproduction,
             r.impact) for r in report.results]


def test_parallel_jobs_reach_the_verdicts_of_one_job_and_note_their_speed_up() -> None:
    kwargs = {"clauses": ["SC10", "SC11", "SC13", "SC14"], "space": IN_PROCESS, "profile": "dev", "seed": 5}
    one, two = check(zoo.OffByOneResume, jobs=1, **kwargs), check(zoo.OffByOneResume, jobs=2, **kwargs)
    assert _verdicts(one) == _verdicts(two)
    assert (one.verdict, one.stopped_at, one.seed) == (two.verdict, two.stopped_at, two.seed)
    assert one["SC10"].status == "failed" and one["SC14"].status == "passed"
    assert any("in 2 parallel processes" in n and "x one core" in n for n in two.notes)
    assert not any("parallel" in n for n in one.notes)


def test_a_failure_of_what_the_parallel_clauses_need_blocks_them_as_on_one_job() -> None:
    # SC18 is judged before the jobs start; once it fails, the resume clauses must be the
    # "not judged" of a run on one job, on any number of jobs.
    kwargs = {"clauses": ["SC10", "SC11", "SC14"], "space": IN_PROCESS, "profile": "dev", "seed": 5}
    one, two = check(zoo.UnseededShuffle, jobs=1, **kwargs), check(zoo.UnseededShuffle, jobs=2, **kwargs)
    # SC18's own record quotes the loader's unseeded orders, which differ from run to run.
    assert [v for v in _verdicts(one) if v[0] != "SC18"] == [v for v in _verdicts(two) if v[0] != "SC18"]
    assert one["SC18"].status == two["SC18"].status == "failed"
    assert [two[c].status for c in kwargs["clauses"]] == ["not-judged"] * 3, [two[c].message for c in kwargs["clauses"]]
    passing = check(zoo.OffByOneResume, jobs=2, **kwargs)  # its SC18 holds (the report lists it as skipped)
    assert passing["SC10"].status == "failed" and passing["SC14"].status == "passed"
    assert any(n.startswith("3 clauses judged in 2 parallel processes") for n in passing.notes), passing.notes


def test_a_crash_in_a_parallel_job_fails_its_clause_and_the_run_goes_on() -> None:
    report = check(misbehaving.SegfaultsAfterResume, clauses=["SC10", "SC12", "SC14"], space=IN_PROCESS,
                   profile="dev", seed=1, jobs=2)
    assert report["SC10"].status == "failed" and report["SC10"].killed_by == "SIGSEGV"
    assert report["SC14"].status == "passed"  # it never resumes


def test_the_checkpoint_space_counts_each_point_once_per_cell() -> None:
    lengths = [4, 4, 4, 4]
    config = LoaderConfig(dataset_size=8, batch_size=2, grad_acc_step=2, num_workers=2)
    counts = coverage_of(config, Checkpoint(Position(1, 1)), lengths)
    assert counts["point:w2/e1/mid-window/h0"] == 1
    hops = coverage_of(config, Hops(Position(0, 0, before_iter=True), (2, 5)), lengths)
    assert hops["point:w2/e0/before-first-iter/h2"] == 1
    space = space_points((0, 1, 2), aligned=False)
    assert len(space) == 3 * (6 + 5) * 3  # worker counts x (kinds in epoch 0 + epoch 1) x hops
    assert len(space_points((0,), aligned=True)) == (5 + 4) * 3  # no mid-window point
    line = describe_space(dict(counts), (0, 1, 2), aligned=False)
    assert line.startswith("checkpoint space: 1 of 99 points (1%); never reached:") and "0 workers" in line


def test_every_report_has_the_share_of_the_checkpoint_space() -> None:
    report = check(zoo.epoch_loader, clauses=["SC10"], space=IN_PROCESS, profile="dev", seed=2)
    assert report.num_workers == [0]
    assert "checkpoint space: " in coverage_line(report) and " of 33 points (" in coverage_line(report)


def test_the_worker_pool_is_fixed_and_holds_the_points_where_worker_bugs_show() -> None:
    pool = worker_pool(ConfigSpace())
    assert pool == worker_pool(ConfigSpace()) and len(pool) == 24
    assert {(c.num_workers, c.persistent_workers, c.shuffle) for c in pool} == {
        (w, p, s) for w in (1, 2) for p in (False, True) for s in (False, True)}
    odd = [c for c in pool if len(replace(c, num_workers=0, persistent_workers=False).stateful_dataloader()) % 2]
    assert len(odd) >= len(pool) // 2
    assert worker_pool(ConfigSpace(num_workers=(0,))) == ()


def test_persistent_workers_reach_torchdata_only_with_workers() -> None:
    assert LoaderConfig(num_workers=1, persistent_workers=True).stateful_dataloader().persistent_workers
    assert not LoaderConfig(num_workers=0, persistent_workers=True).stateful_dataloader().persistent_workers


# --- Each job takes its own uninterrupted runs: a stream that depends on the process --------------

class PidShuffled(zoo.EpochLoader):
    """Shuffles each epoch with a seed from its process id: exact in one process, another stream in
    the next job. Two fresh loaders agree (SC18 holds) and a resume in the same process is exact."""

    def order(self, epoch: int) -> list[int]:
        import os

        g = torch.Generator().manual_seed(os.getpid() * 100 + epoch)
        return torch.randperm(self.config.dataset_size, generator=g).tolist()


def test_a_stream_that_depends_on_the_process_gets_the_verdicts_of_one_job_on_two() -> None:
    # Each job compares its examples with the uninterrupted runs it took itself, so only SC10's resume
    # in a fresh process sees the dependence (worker configs too: the zoo's loader starts no workers).
    kwargs = {"clauses": ["SC10", "SC11", "SC13", "SC20"], "space": ConfigSpace(num_workers=(0, 1)),
              "profile": "dev", "seed": 5}
    one, two = check(PidShuffled, jobs=1, **kwargs), check(PidShuffled, jobs=2, **kwargs)
    assert [(r.id, r.status) for r in one.results] == [(r.id, r.status) for r in two.results]
    assert two["SC10"].status == "failed" and "fresh" in two["SC10"].message, two["SC10"].message
    assert [two[c].status for c in ("SC11", "SC13", "SC20")] == ["passed"] * 3
