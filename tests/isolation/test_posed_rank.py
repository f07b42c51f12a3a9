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

from stateful_contract.isolation.ranks.turns import posing_as


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
