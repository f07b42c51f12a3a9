"""A rank of another world posed on this process: what SC31's turns need in a world the user's launcher started.

In such a world a world of another size takes turns on its processes (`world.Handler.as_ranks`: new rank ``r`` on
process ``r % W``). The loader is built from ``config.rank``/``config.world_size``, but many builders ask
``torch.distributed`` instead (torchtitan's and Megatron's builders, torch's ``DistributedSampler`` given no
``rank``/``num_replicas``): answered with the launcher's rank and size, such a loader resumed as rank 0 of 2 in a
world of 1, accepted its own state and lost the other rank's samples, a false SC31 failure of a loader that a real
world of 1 sees refuse. So, for a turn, the default group's rank and size and the ``RANK``/``WORLD_SIZE`` variables
say the posed rank, as a real world of that size would. Other groups, and collectives, stay the launcher's (no
collective may run in a turn).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

__all__ = ["posing_as"]

#: The modules a loader reaches these functions through (``dist.get_rank()``, ``distributed_c10d.get_rank()``).
_MODULES = (dist, c10d)


@contextlib.contextmanager
def posing_as(rank: int, world_size: int) -> Iterator[None]:
    """Within: ``dist.get_rank()``/``dist.get_world_size()`` of the default group, and ``RANK``/``WORLD_SIZE``,
    answer ``rank`` of ``world_size``; restored after."""
    answers = {"get_rank": rank, "get_world_size": world_size}
    real = {name: getattr(c10d, name) for name in answers}

    def posed(value: int, function: Callable[..., int]) -> Callable[..., int]:
        def answer(group: Any = None) -> int:
            return value if group is None or group is c10d.GroupMember.WORLD else function(group)

        return answer

    saved_env = {name: os.environ.get(name) for name in ("RANK", "WORLD_SIZE")}
    saved = [(module, name, getattr(module, name)) for module in _MODULES for name in answers]
    try:
        for module in _MODULES:
            for name, posed_value in answers.items():
                setattr(module, name, posed(posed_value, real[name]))
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
