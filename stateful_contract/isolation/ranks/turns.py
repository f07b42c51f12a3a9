"""A rank of another world posed on this process: what SC31's turns need in a world the user's launcher started.

In such a world a world of another size takes turns on its processes (`world.Handler.as_ranks`: new rank ``r`` on
process ``r % W``). The loader is built from ``config.rank``/``config.world_size``, but many builders ask
``torch.distributed`` instead (torchtitan's and Megatron's builders, torch's ``DistributedSampler`` given no
``rank``/``num_replicas``): answered with the launcher's rank and size, such a loader resumed as rank 0 of 2 in a
world of 1, accepted its own state and lost the other rank's samples, a false SC31 failure of a loader that a real
world of 1 sees refuse. So, for a turn, the default group's rank and size and the ``RANK``/``WORLD_SIZE`` variables
say the posed rank, as a real world of that size would. A collective cannot run in a turn (the posed world's other
ranks are not running): one hung the launch for good (an ``all_reduce`` in ``load_state_dict``, in C where no alarm
reaches), so the default group's collectives raise `CollectiveInTurn`, which leaves the clause not judged and says
how to judge it (two launches). So does a question to another group (``dist.get_world_size(dp_group)``), whose rank
and size in the posed world no turn can know: answered with the launcher's, a correct loader that asks its cached
data-parallel group resumed as rank 0 of 2 in a world of 1 and failed SC31 falsely ("2 samples lost"), where the
same check on ranks the checker starts, and a real world of 1, see it refuse.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from ...repro.steps import NotJudgeable

__all__ = ["CollectiveInTurn", "posing_as"]

#: The collectives a loader or sampler calls (``torch.distributed.<name>``) that a turn refuses.
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "all_to_all",
               "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list", "gather",
               "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list",
               "new_group", "new_subgroups", "new_subgroups_by_enumeration")


class CollectiveInTurn(NotJudgeable):
    """The loader ran a collective while this process posed as a rank of another world."""

#: The modules a loader reaches these functions through (``dist.get_rank()``, ``distributed_c10d.get_rank()``).
_MODULES = (dist, c10d)


@contextlib.contextmanager
def posing_as(rank: int, world_size: int) -> Iterator[None]:
    """Within: ``dist.get_rank()``/``dist.get_world_size()`` of the default group, and ``RANK``/``WORLD_SIZE``,
    answer ``rank`` of ``world_size``; asked of another group, and a collective, raise `CollectiveInTurn`;
    restored after. Needs the launcher's process group to say its size."""
    answers = {"get_rank": rank, "get_world_size": world_size}
    real = {name: getattr(c10d, name) for name in answers}

    ranks = f"{world_size} rank" + ("s" if world_size != 1 else "")
    judge_in_two = (f"so this change of world size cannot be judged in one launch; judge it in two: --phase save in "
                    f"this launch, then --phase resume in a launch of {ranks}")

    def posed(name: str, value: int) -> Callable[..., int]:
        def answer(group: Any = None) -> int:
            if group is None or group is c10d.GroupMember.WORLD:
                return value
            raise CollectiveInTurn(
                f"the loader asked torch.distributed.{name}(group) of a group of its own as rank {rank} of a world "
                f"of {ranks}, which takes turns on the processes of the launcher's world of "
                f"{real['get_world_size']()}: a turn poses the default group alone, and what that group would "
                f"be in a world of {ranks} no turn can tell, {judge_in_two}")

        return answer

    def refused(name: str) -> Callable[..., Any]:
        def collective(*args: Any, **kwargs: Any) -> Any:
            raise CollectiveInTurn(
                f"the loader called torch.distributed.{name} as rank {rank} of a world of {ranks}, which "
                f"takes turns on the processes of the launcher's world of {real['get_world_size']()}: a collective cannot "
                f"run in a turn (the other ranks of that world are not running), {judge_in_two}")

        return collective

    saved_env = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE")}
    saved = [(module, name, getattr(module, name)) for module in _MODULES for name in (*answers, *COLLECTIVES)
             if hasattr(module, name)]
    try:
        for module in _MODULES:
            for name, posed_value in answers.items():
                setattr(module, name, posed(name, posed_value))
            for name in COLLECTIVES:
                if hasattr(module, name):
                    setattr(module, name, refused(name))
        os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world_size)
        yield
    finally:
        for module, name, function in saved:
            setattr(module, name, function)
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
