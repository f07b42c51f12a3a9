"""A rank of another world posed on this process (`isolation/ranks/turns.py`): in a launcher's world, SC31's
world of another size takes turns on its processes, and a loader that asks ``torch.distributed`` for its rank must
hear the posed rank, as a real world of that size would tell it. The launch that shows the verdict is in
``tests/faces/test_in_world.py``."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest
import torch.distributed as dist
from torch.utils.data import DistributedSampler

from stateful_contract.isolation.ranks.turns import CollectiveInTurn, posing_as
from stateful_contract.repro.steps import NotJudgeable


def test_the_default_group_and_the_environment_say_the_posed_rank_and_are_restored_after() -> None:
    before = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE")}
    real = dist.get_rank, dist.get_world_size
    with posing_as(2, 3):
        assert (dist.get_rank(), dist.get_world_size()) == (2, 3)
        assert (os.environ["RANK"], os.environ["WORLD_SIZE"]) == ("2", "3")
        # torch's own sampler, given no rank or num_replicas, deals rank 2 of 3 its share
        assert list(DistributedSampler(cast(Any, range(9)), shuffle=False)) == [2, 5, 8]
    assert (dist.get_rank, dist.get_world_size) == real
    assert {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE")} == before


def test_what_the_loader_raises_in_a_turn_leaves_the_real_functions() -> None:
    real = dist.get_rank, dist.get_world_size
    with pytest.raises(ValueError, match="refused"), posing_as(1, 2):
        raise ValueError("refused")
    assert (dist.get_rank, dist.get_world_size) == real


def test_a_collective_in_a_turn_is_refused_as_not_judgeable_and_works_again_after() -> None:
    """No other rank of the posed world runs: a collective would wait for ever (in C, past every alarm)."""
    import torch

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        with posing_as(2, 3), pytest.raises(CollectiveInTurn, match="--phase resume") as refused:
            dist.barrier()
        assert isinstance(refused.value, NotJudgeable) and "launcher's world of 1" in str(refused.value)
        dist.all_reduce(torch.ones(1))  # the launcher's group again
    finally:
        dist.destroy_process_group()


def test_another_group_asked_in_a_turn_is_refused_as_not_judgeable_and_answers_again_after() -> None:
    """A turn poses the default group alone: a data-parallel group the loader made and cached would say the
    launcher's rank and size, and a correct loader that asks it failed SC31 falsely."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        dp_group = dist.new_group(backend="gloo")
        with posing_as(2, 3):
            assert dist.get_rank(dist.group.WORLD) == 2  # the default group, named, is posed
            with pytest.raises(CollectiveInTurn, match=r"get_world_size\(group\) of a group of its own") as refused:
                dist.get_world_size(dp_group)
            assert "--phase resume in a launch of 3 ranks" in str(refused.value)
            with pytest.raises(CollectiveInTurn, match="new_group"):
                dist.new_group(backend="gloo")
        assert (dist.get_rank(dp_group), dist.get_world_size(dp_group)) == (0, 1)
    finally:
        dist.destroy_process_group()
