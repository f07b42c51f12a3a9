"""The engine against hostile loaders: hangs, exceptions, worker processes, declarations."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import zoo
import zoo_kills
from charged import charged, charged_to_this_process

from stateful_contract import ConfigSpace, FactoryError, check
from stateful_contract.reference import factories

IN_PROCESS = ConfigSpace(num_workers=(0,))


def test_a_hanging_loader_fails_its_clause_within_the_timeout_and_the_run_goes_on():
    with charged(charged_to_this_process()) as charge:  # as the limit is: not the run queue's waits
        report = check(zoo.HangsOnResume, clauses=["SC10", "SC18"], space=IN_PROCESS, timeout=2)
    assert charge.seconds < 30, charge.seconds
    assert report["SC10"].status == "failed"
    assert "hung" in report["SC10"].message and "2 s" in report["SC10"].message
    assert report["SC18"].status == "passed"  # it never resumes, so it never hangs there


class _HangInWorker:
    """A dataset whose samples hang forever, but only inside a worker process."""

    def __init__(self, config):
        self.dataset = config.dataset
        self.main = multiprocessing.current_process().name

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        if multiprocessing.current_process().name != self.main:
            time.sleep(3600)
        return self.dataset[i]


def hangs_in_a_worker(config):
    return _loader_over(_HangInWorker(config), config)


def _loader_over(dataset, config):
    from torchdata.stateful_dataloader import StatefulDataLoader

    context = {"multiprocessing_context": "fork"} if config.num_workers else {}
    return StatefulDataLoader(dataset, batch_size=config.batch_size, num_workers=config.num_workers, **context)


def test_a_loader_hanging_in_its_workers_leaves_no_process_behind():
    before = {p.pid for p in multiprocessing.active_children()}
    report = check(hangs_in_a_worker, clauses=["SC18"], space=ConfigSpace(num_workers=(1,)), timeout=3)
    assert report["SC18"].status == "failed"
    assert "hung" in report["SC18"].message
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_an_exception_from_the_loader_is_the_clause_failure_with_its_traceback():
    report = check(zoo.RaisesOnResume, clauses=["SC10"], space=IN_PROCESS)
    message = report["SC10"].message
    assert report["SC10"].status == "failed"
    assert "RuntimeError: cannot resume: shard index not found" in message
    assert "Traceback of the loader's exception" in message and "zoo.py" in message


def test_an_endless_loader_is_recognised_at_once_and_checked_as_a_stream_not_reported_as_hung():
    with charged(charged_to_this_process()) as charge:
        report = check(zoo.Endless, clauses=["SC10"], space=IN_PROCESS, timeout=600)
    assert report.endless == "found" and report.passed, report["SC18"].message or report["SC10"].message
    assert report["SC10"].status == "passed" and report["SC10"].examples > 1
    assert charge.seconds < 600, "recognised on its first pass, not waited out as a hang"


def test_a_long_pass_that_ends_is_not_called_endless():
    # A pass of dataset_size * seq_len batches, the most one epoch can make: judged as any other.
    report = check(zoo.TokenByToken, clauses=["SC10"], space=IN_PROCESS)
    assert report["SC10"].status == "passed", report["SC10"].message


def test_a_factory_that_raises_or_returns_no_loader_is_a_factory_error():
    with pytest.raises(FactoryError, match="no dataset configured"):
        check(zoo.factory_raises)
    with pytest.raises(FactoryError, match="not a loader"):
        check(zoo.not_a_loader)


def asks_torch_distributed(config):
    """A trainer's builder: its sampler takes the rank from torch.distributed (no ``rank=``)."""
    from torch.utils.data import DistributedSampler

    return DistributedSampler(config.dataset)


def test_a_factory_that_asks_torch_distributed_on_one_rank_is_told_what_to_do_instead():
    # Once told to narrow the config space (persistent_workers...), which no space can fix.
    with pytest.raises(FactoryError, match=r"asks torch.distributed .* config\.rank and config\.world_size") as told:
        check(asks_torch_distributed, clauses=["SC01"])
    assert "world_size=2" in str(told.value) and "persistent_workers" not in str(told.value)


def reads_torchrun_s_rank(config):
    """A torchrun script's builder: its rank from the launcher's variables."""
    import os

    from torch.utils.data import DistributedSampler

    return DistributedSampler(config.dataset, num_replicas=int(os.environ["WORLD_SIZE"]), rank=int(os.environ["RANK"]))


def test_a_factory_that_reads_torchrun_s_rank_on_one_rank_is_told_what_to_do_instead(monkeypatch):
    # Once told to narrow the config space, as above.
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(FactoryError, match=r"reads (WORLD_SIZE|RANK) from the environment, which torchrun sets .* "
                                           r"config\.rank and config\.world_size") as told:
        check(reads_torchrun_s_rank, clauses=["SC01"])
    assert "world_size=2" in str(told.value) and "persistent_workers" not in str(told.value)


def test_expected_failures_are_strict():
    report = check(zoo.CustomObjectInState, clauses=["SC17", "SC15"], space=IN_PROCESS,
                   expected_failures={"SC17": "state holds a dataclass", "SC15": "stale declaration"})
    assert report["SC17"].status == "expected-failure"
    assert report["SC17"].expected_failure_reason == "state holds a dataclass"
    assert report["SC15"].status == "unexpected-pass"
    assert "remove the declaration" in report["SC15"].message
    assert not report.passed


def test_a_declared_failure_that_fails_keeps_the_verdict_passing():
    report = check(zoo.CustomObjectInState, clauses=["SC17"], space=IN_PROCESS,
                   expected_failures={"SC17": "state holds a dataclass"})
    assert report.passed and report.deviations == {"SC17": "state holds a dataclass"}


def test_an_unknown_expected_failure_id_is_reported():
    with pytest.warns(UserWarning, match="SC99"):
        report = check(zoo.epoch_loader, clauses=["SC01"], expected_failures={"SC99": "typo"})
    assert any("SC99" in n for n in report.notes)


def test_when_sc18_fails_the_resume_clauses_are_not_judged_and_say_why():
    report = check(zoo.UnseededShuffle, space=IN_PROCESS)
    assert report["SC18"].status == "failed"
    for cid in ("SC10", "SC11", "SC17"):
        assert report[cid].status == "not-judged"
        assert "SC18" in report[cid].message


@pytest.mark.parametrize("loader", [pytest.param(loader, marks=zoo_kills.group(loader)) for loader in (
    zoo.OffByOneResume, zoo.CountsSinceResume, zoo.LiveState, zoo.LoadConsumesArgument, zoo.StateDictSkipsABatch)])
def test_the_printed_reproduction_reproduces_the_failure(loader, tmp_path_factory):
    """Copy-paste the reproduction into a fresh namespace: it must fail the same way."""
    cid = zoo.KILLS[loader]
    result = zoo_kills.killed(tmp_path_factory, loader)[cid]  # test_clauses' kill, searched once
    assert result.status == "failed"
    assert len(result.reproduction.splitlines()) <= 16, result.reproduction
    with pytest.raises(AssertionError):
        exec(compile(result.reproduction, "<reproduction>", "exec"), {})


@zoo_kills.group(zoo.OffByOneResume)
def test_reproductions_of_correct_loaders_pass_when_run(tmp_path_factory):
    """The same reproduction against a correct loader runs clean: it tests the loader, not luck."""
    result = zoo_kills.killed(tmp_path_factory, zoo.OffByOneResume)["SC10"]
    code = result.reproduction.replace("from zoo import OffByOneResume; factory = OffByOneResume",
                                       "from zoo import EpochLoader as factory")
    assert code != result.reproduction
    exec(compile(code, "<reproduction>", "exec"), {})


def test_alignment_restricts_checkpoints_to_window_boundaries():
    report = check(factories.proposed_fix_wrapper, clauses=["SC10"], checkpoint_alignment="window", space=IN_PROCESS)
    assert report["SC10"].status == "passed"
    assert report.checkpoint_alignment == "window"


def test_profiles_set_the_number_of_examples():
    dev = check(zoo.epoch_loader, clauses=["SC10"], profile="dev", space=IN_PROCESS)["SC10"].examples
    ci = check(zoo.epoch_loader, clauses=["SC10"], profile="ci", space=IN_PROCESS)["SC10"].examples
    assert 15 <= dev < ci


def test_structure_points_follow_the_loaders_own_epoch_length():
    """A factory that fixes drop_last (fewer batches than the config suggests) is no SC03 failure."""
    from stateful_contract import LoaderConfig  # noqa: F401 - the factory's argument type

    def drop_last_always(config):
        return config.stateful_dataloader(drop_last=True)

    report = check(drop_last_always, clauses=["SC03"])
    assert report["SC03"].status == "passed", report["SC03"].message


class _RaisesABaseException(zoo.EpochLoader):
    def load_state_dict(self, state_dict):
        from torch.distributed.checkpoint.api import CheckpointException  # not an Exception: a BaseException

        if state_dict["offset"] or state_dict["epoch"]:  # a fresh state loads: the probe passes
            raise CheckpointException("the checkpoint has no key 'dataloader.world_size'", {})
        super().load_state_dict(state_dict)


def test_dcps_base_exception_from_the_loader_is_its_clause_failure_not_a_crash():
    """Other BaseExceptions are not the loader's and stop the run: tests/isolation/test_interrupts_are_not_verdicts.py."""
    report = check(_RaisesABaseException, clauses=["SC10"], space=IN_PROCESS, profile="dev")
    assert report["SC10"].status == "failed"
    assert "load_state_dict(state) raised CheckpointException" in report["SC10"].got, report["SC10"].got
