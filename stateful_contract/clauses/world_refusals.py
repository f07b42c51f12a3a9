"""How a refused world-size change is read (SC31's advisory, SC41's verdict): whether the exception names the world
sizes, and what a user is told where it does not."""

from __future__ import annotations

import re
from typing import Protocol

from ..spellings import Hint

__all__ = ["names_the_world_size", "unnamed_world_refusal"]

#: Words that say a message is about the number of ranks (torchtitan: "dp_degree is inconsistent").
_WORLD_WORDS = re.compile(r"world|replica|degree|data[ _-]?parallel|\bdp\b|dp_", re.IGNORECASE)


class Refused(Protocol):
    """A new world's rank whose resume was refused (`world_change.WorldResume`)."""

    refusal: str


def names_the_world_size(error: BaseException, saved: int, resumed: int) -> bool:
    """Whether an exception refuses the state for the world size: it says "world size" (or replicas,
    the data-parallel degree), or names both sizes and ranks."""
    text = f"{type(error).__name__}: {error}"
    if _WORLD_WORDS.search(text):
        return True
    numbers = set(re.findall(r"\d+", text))
    return {str(saved), str(resumed)} <= numbers and "rank" in text.lower()


def unnamed_world_refusal(refused: Refused) -> str:
    """What a user is told where a world-size change is refused without naming the sizes."""
    return (f"a resume on another world size was refused before its first batch (nothing is lost, so SC31 passes), "
            f"but {refused.refusal} does not name the two world sizes: whoever restarts an elastic job on "
            "fewer or more ranks is not told why it fails. Fix: record world_size in state_dict() and, in "
            "load_state_dict(), raise e.g. ValueError(f\"state saved on world_size={saved} ranks, this run has "
            f"world_size={{now}}\"). SC41 ({Hint('strict', True)}) requires it.")
