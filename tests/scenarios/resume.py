"""What a resumed pair of runs trained on, micro-batch by micro-batch, against an uninterrupted run.

A checkpoint that resumes exactly leaves no trace in the data: run 1's micro-batches
followed by run 2's are, on every rank, the uninterrupted run's, with the same samples
and the same window token count (the per-token loss's denominator). `compare_data`
says whether that holds and, when it does not, what was lost, what was trained on
instead, and which token counts changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .runs import MicroBatch, TrainingRun

__all__ = ["DataComparison", "compare_data"]

#: Token-count changes quoted per rank before "and N more".
QUOTED = 3


@dataclass
class DataComparison:
    """Run 1 + run 2 against the uninterrupted run, over its first ``iterations`` iterations."""

    iterations: int
    world_size: int
    micro_batches: int = 0  # compared, over every rank
    #: Micro-batches the uninterrupted run logged that the pair did not (or the pair logged twice).
    missing: list[str] = field(default_factory=list)
    #: Per rank: samples of those iterations the resumed pair never trained on, in the uninterrupted order.
    lost: dict[int, list[int]] = field(default_factory=dict)
    #: Per rank: samples the pair trained on instead (from later windows), in the pair's order.
    instead: dict[int, list[int]] = field(default_factory=dict)
    #: Per rank: (micro-batch, uninterrupted window tokens, resumed window tokens) where they differ.
    tokens: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    #: Micro-batches whose samples differ, over every rank.
    different: int = 0

    @property
    def exact(self) -> bool:
        return self.micro_batches > 0 and not (self.missing or self.different or any(self.tokens.values()))

    @property
    def lost_count(self) -> int:
        return sum(len(v) for v in self.lost.values())

    def describe(self) -> list[str]:
        """Lines for the scenario's story."""
        ranks = ", ".join(map(str, range(self.world_size)))
        if self.micro_batches == 0:
            return ["no micro-batch lines to compare (was the trainer run with --log-batches?)"]
        if self.exact:
            return [f"data: the same {self.micro_batches} micro-batches as the uninterrupted run on ranks {ranks} "
                    f"(iterations 1-{self.iterations}): same samples in the same order, same window token counts"]
        lines = [f"data: {self.different} of {self.micro_batches} micro-batches differ from the uninterrupted run's "
                 f"(iterations 1-{self.iterations}, ranks {ranks})"]
        lines += [f"missing: {m}" for m in self.missing]
        for rank in range(self.world_size):
            if self.lost.get(rank):
                lines.append(f"rank {rank} lost {len(self.lost[rank])} samples {_ids(self.lost[rank])} and trained on "
                             f"{len(self.instead.get(rank, []))} of later windows instead {_ids(self.instead.get(rank, []))}")
            changes = self.tokens.get(rank, [])
            if changes:
                quoted = ", ".join(f"micro-batch {mb}: {a} -> {b}" for mb, a, b in changes[:QUOTED])
                more = f" and {len(changes) - QUOTED} more" if len(changes) > QUOTED else ""
                lines.append(f"rank {rank} window token counts changed in {len(changes)} micro-batches ({quoted}{more})")
        return lines


def _ids(samples: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, samples)) + "]"


def compare_data(run1: TrainingRun, run2: TrainingRun, uninterrupted: TrainingRun, *, world_size: int,
                 iterations: int) -> DataComparison:
    """Compare, rank by rank, what run 1 then run 2 trained on with the uninterrupted run's iterations 1..``iterations``."""
    found = DataComparison(iterations, world_size)
    for rank in range(world_size):
        wanted = [mb for mb in uninterrupted.micro_batches(rank) if mb.iteration <= iterations]
        resumed: dict[tuple[int, int], MicroBatch] = {}
        for mb in run1.micro_batches(rank) + run2.micro_batches(rank):
            if mb.key in resumed:
                found.missing.append(f"rank {rank} trained micro-batch {mb} twice")
            resumed[mb.key] = mb
        got = [resumed[mb.key] for mb in wanted if mb.key in resumed]
        found.missing += [f"rank {rank} has no micro-batch {mb}" for mb in wanted if mb.key not in resumed]
        found.micro_batches += len(wanted)
        found.different += sum(1 for a, b in zip(wanted, got) if a.samples != b.samples)
        seen = {s for mb in got for s in mb.samples}
        expected = {s for mb in wanted for s in mb.samples}
        found.lost[rank] = [s for mb in wanted for s in mb.samples if s not in seen]
        found.instead[rank] = [s for mb in got for s in mb.samples if s not in expected]
        found.tokens[rank] = [(str(a), a.window_tokens, b.window_tokens)
                              for a, b in zip(wanted, got) if a.window_tokens != b.window_tokens]
    return found
