"""Epoch alignment: SC21's set_epoch loop, SC10's empty epochs, and the base loader's distributed sampler.

The in-process checks cost a fraction of a second each; the two multi-rank checks at the
end start real rank processes (profile ``dev``, about half a minute each on 2 cores).
"""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path

import pytest
import torch
import zoo
import zoo_kills
from torch.utils.data import BatchSampler, DistributedSampler

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.faces.distributed import check_world
from stateful_contract.repro import (
    LoopPoint,
    Position,
    assert_no_epoch_lost,
    assert_same_epochs,
    epoch_loop,
    epoch_setter,
    fresh,
    loop_checkpoint,
)
from stateful_contract.samplers import DistributedBatchSampler
from tests import stateful_dataloader_matrix as matrix

IN_PROCESS = ConfigSpace(num_workers=(0,))
ZOO = Path(zoo.__file__).resolve()


@pytest.fixture(autouse=True)
def _quiet() -> None:
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")  # docs/findings.md, F7


# --- the judgements say which epoch ------------------------------------------------------

def _batches(*ids: int) -> list[dict[str, torch.Tensor]]:
    return [{"index": torch.tensor([i])} for i in ids]


@pytest.mark.parametrize(("got", "says"), [
    ({1: [], 2: _batches(4, 5)}, "epoch 1 is empty"),
    ({1: _batches(3), 2: _batches(4, 5)}, "epoch 1 lost its first 1 of 2 batches"),
    ({1: _batches(2), 2: _batches(4, 5)}, "epoch 1 lost its last 1 of 2 batches"),
    ({1: _batches(1, 2, 3), 2: _batches(4, 5)}, "epoch 1 replayed 1 batches before the checkpoint"),
    ({1: _batches(2, 3), 2: _batches(2, 3)}, "epoch 2 replayed epoch 1's batches"),
])
def test_assert_same_epochs_names_the_epoch_and_what_happened_to_it(got, says):  # type: ignore[no-untyped-def]
    expected = {1: _batches(2, 3), 2: _batches(4, 5)}
    assert_same_epochs(expected, copy.deepcopy(expected))
    with pytest.raises(AssertionError, match=says):
        assert_same_epochs(expected, got)


def test_an_empty_pass_is_allowed_only_where_torchdata_has_one():
    lengths = [2, 2, 2, 2]
    after_last, after_stop = Position(0, 2), Position(0, 2, after_stop=True)
    assert_no_epoch_lost(lengths, after_last, [0, 2, 2])      # torchdata's empty rest of epoch 0
    assert_no_epoch_lost(lengths, after_last, [2, 2])         # or a loader that rolls over
    # Passes are numbered from 0, as epochs are.
    with pytest.raises(AssertionError, match=r"epoch lost: the resumed loader's pass 0 \(its first iter\(\)\)"):
        assert_no_epoch_lost(lengths, after_stop, [0, 2, 2])  # past StopIteration: an epoch lost
    with pytest.raises(AssertionError, match="epoch lost: the resumed loader's pass 1"):
        assert_no_epoch_lost(lengths, after_last, [0, 0, 2])
    with pytest.raises(AssertionError, match="epoch lost: the resumed loader's pass 1"):
        assert_no_epoch_lost(lengths, Position(0, 1), [1, 0, 2])
    assert_no_epoch_lost([0, 0, 0, 0], Position(0, 0, after_stop=True), [0, 0])  # epochs with no batch at all


# --- the clauses on the zoo ----------------------------------------------------------------

@zoo_kills.group(zoo.StopIterationStateStillFinishing)
def test_sc10_says_epoch_lost_for_an_empty_epoch_after_stop_iteration(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = zoo_kills.killed(tmp_path_factory, zoo.StopIterationStateStillFinishing)["SC10"]  # test_clauses' kill
    assert result.status == "failed"
    assert "StopIteration" in result.context and result.got.startswith("epoch lost")
    assert "assert_no_epoch_lost(lengths, Position(" in result.reproduction


@zoo_kills.group(zoo.EndOfEpochStateIgnoresSetEpoch)
def test_sc21_names_the_lost_epoch_and_the_epoch_the_trainer_resumed_at(tmp_path_factory: pytest.TempPathFactory) -> None:
    result = zoo_kills.killed(tmp_path_factory, zoo.EndOfEpochStateIgnoresSetEpoch)["SC21"]  # test_clauses' kill
    assert result.status == "failed"
    assert "after the last batch" in result.context and "resumed at epoch 1" in result.context
    assert "epoch 1 is empty" in result.got and "is lost" in result.got
    assert "epoch_loop(loader_2, 1, 3)" in result.reproduction


def test_sc21_can_be_declared_an_expected_failure():
    report = check(zoo.EndOfEpochStateIgnoresSetEpoch, clauses=["SC21"], space=IN_PROCESS,
                   expected_failures={"SC21": "resumes an end-of-epoch state into the empty rest of the epoch"})
    assert report["SC21"].status == "expected-failure" and report.passed


def test_the_trainer_loop_steps_run_outside_the_suite():
    config = LoaderConfig(dataset_size=6, batch_size=2, shuffle=True)
    factory = zoo.set_epoch_loader
    assert epoch_setter(fresh(factory, config)) == "loader"
    assert epoch_setter(fresh(zoo.epoch_loader, config)) is None
    reference = epoch_loop(fresh(factory, config), 0, 3)
    state = loop_checkpoint(fresh(factory, config), LoopPoint(epoch=0, batches=3))
    assert_same_epochs({1: reference[1], 2: reference[2]}, epoch_loop(fresh(factory, config, state=state), 1, 3))


# --- DistributedBatchSampler ----------------------------------------------------------------

def _sampler(**kw):  # type: ignore[no-untyped-def]
    args = {"num_replicas": 2, "rank": 0, "shuffle": True, "seed": 3, "drop_last": False, **kw}
    return DistributedBatchSampler(range(9), 2, **args)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("rank", [0, 1])
def test_it_deals_the_batches_of_torchs_distributed_sampler(rank, drop_last):  # type: ignore[no-untyped-def]
    ours = _sampler(rank=rank, drop_last=drop_last)
    theirs = DistributedSampler(range(9), num_replicas=2, rank=rank, shuffle=True, seed=3, drop_last=drop_last)
    for epoch in (0, 1, 2):
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(BatchSampler(theirs, 2, drop_last))
        assert len(ours) == len(list(BatchSampler(theirs, 2, drop_last)))


def test_its_count_starts_at_iter_and_a_finished_state_gives_way_to_a_later_epoch():
    s = _sampler()
    s.set_epoch(1)
    it = iter(s)
    assert s.state_dict() == {"epoch": 1, "batches": 0, "num_replicas": 2}  # at iter(), not at the first batch
    epoch1 = list(it)
    finished = s.state_dict()
    assert finished == {"epoch": 1, "batches": len(epoch1), "num_replicas": 2}
    same = _sampler()
    same.load_state_dict(finished)
    assert same.state_dict() == finished  # right after a load: the loaded state
    assert list(same) == [] and same.epoch == 1  # no set_epoch: the empty rest of epoch 1
    later = _sampler()
    later.load_state_dict(finished)
    later.set_epoch(2)
    reference = _sampler()
    reference.set_epoch(2)
    assert list(later) == list(reference)  # the trainer moved on: epoch 2 from its first batch
    mid = _sampler()
    mid.load_state_dict({"epoch": 1, "batches": 1, "num_replicas": 2})
    mid.set_epoch(2)
    assert list(mid) == epoch1[1:] and mid.epoch == 1  # an unfinished epoch is resumed whatever was set


def test_it_refuses_a_state_of_another_world_size_naming_both():
    s = _sampler(num_replicas=4)
    with pytest.raises(ValueError, match=r"world size 2.*world size 4"):
        s.load_state_dict(_sampler().state_dict())
    with pytest.raises(ValueError, match="expects the keys"):
        s.load_state_dict({"yielded": 3})


def test_the_base_loader_at_world_size_2_uses_it_and_torchdata_sampler_entries_declare_their_failures():
    loader = LoaderConfig(world_size=2, rank=1).stateful_dataloader()
    assert isinstance(loader.batch_sampler, DistributedBatchSampler)
    assert epoch_setter(loader) == "loader.batch_sampler"
    assert epoch_setter(LoaderConfig().stateful_dataloader()) is None  # world size 1: torchdata's samplers
    assert set(matrix.MATRIX["stateful_distributed_sampler"].expected_failures) == {"SC10", "SC11", "SC13", "SC21", "SC22"}
    assert set(matrix.MATRIX["distributed_sampler"].expected_failures) == {"SC21"}
    assert not matrix.MATRIX["distributed_batch_sampler"].expected_failures


# --- on 2 ranks ---------------------------------------------------------------------------

needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")


@pytest.mark.acceptance
@needs_linux
def test_the_base_loader_passes_on_two_ranks_what_torchdatas_sampler_fails(tmp_path: Path) -> None:
    """Every clause passes on two ranks (`stateful-contract check ...:stateful_dataloader --world-size 2`,
    about a minute, docs/findings.md F12); here the ones torchdata's StatefulDistributedSampler fails."""
    clauses = ["SC10", "SC11", "SC13", "SC21", "SC30"]
    report = check_world("stateful_contract.reference.factories:stateful_dataloader", world_size=2, profile="dev",
                         clauses=clauses, run_dir=tmp_path / "run")
    assert report.passed, {r.id: r.message for r in report.results if r.is_failure}
    assert all(report[c].status == "passed" for c in clauses)
    assert report["SC21"].examples >= 15


@needs_linux
def test_sc21_kills_the_broken_loader_on_two_ranks(tmp_path: Path) -> None:
    report = check_world(f"{ZOO}:EndOfEpochStateIgnoresSetEpoch", world_size=2, profile="dev", clauses=["SC21"],
                         run_dir=tmp_path / "run")
    result = report["SC21"]
    assert result.status == "failed" and result.message.startswith("SC21"), result.message
    assert "is lost" in result.got
