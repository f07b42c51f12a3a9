"""What the multi-rank clauses (SC30, SC31) share: each rank's resume, and samples counted over ranks.

Each rank reports a `RankResume`: whether its resumed stream was exactly its own
uninterrupted stream from the checkpoint on, and which samples (the ``index`` field of
the contract's dataset) each stream held. `every_rank_resumed` raises the clause's
violation when a rank did not, saying which ranks failed and, over all ranks, which
samples were lost and which were repeated, and whose they were: a rank that resumed
another rank's position shows up as repeating that rank's samples.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from .._engine.example import Example
from .registry import violated

__all__ = ["RankResume", "coverage", "every_rank_resumed", "example_folder", "id_list", "sample_ids"]

#: Sample ids a message lists before eliding.
SHOWN_IDS = 12


@dataclass
class RankResume:
    """What one rank observed for one checkpoint: its own verdict and its samples."""

    rank: int
    #: How the state travelled, e.g. ``"torch.save per rank"``.
    via: str = ""
    #: The loader raised, or hung, or the state could not be saved or read back.
    error: str | None = None
    hung: bool = False
    #: The error is a refusal the clause accepts (a state from another rank, named as such).
    refused: bool = False
    #: Where the resumed stream departs from the uninterrupted one (None: exact).
    difference: str | None = None
    #: Sample ids of the uninterrupted stream from the checkpoint on, and of the resumed
    #: stream (None when batches carry no ``index`` field).
    expected_ids: list[int] | None = None
    resumed_ids: list[int] | None = None
    expected_batches: int = 0
    #: Whose saved state this rank was given back (a shared DCP key), when it was not its own.
    loaded_from: str = ""

    @property
    def exact(self) -> bool:
        return self.error is None and self.difference is None


def sample_ids(batches: Sequence[Any]) -> list[int] | None:
    """The sample indices of a stream, batch after batch, or None without an ``index`` field."""
    ids: list[int] = []
    for batch in batches:
        if not isinstance(batch, Mapping) or "index" not in batch:
            return None
        index = batch["index"]
        values = index.flatten().tolist() if isinstance(index, torch.Tensor) else index
        if isinstance(values, int):
            values = [values]
        if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
            return None
        ids.extend(values)
    return ids


def id_list(counter: Counter[int]) -> str:
    """``[3, 5, 5] (3 samples)``: the ids of a multiset, elided after `SHOWN_IDS`."""
    ids = sorted(counter.elements())
    shown = ", ".join(map(str, ids[:SHOWN_IDS]))
    return f"[{shown}{', ...' if len(ids) > SHOWN_IDS else ''}] ({len(ids)} sample{'s' if len(ids) != 1 else ''})"


def coverage(results: Sequence[RankResume]) -> list[str]:
    """Over all ranks: samples lost and repeated, attributed to ranks (empty when exact)."""
    if any(r.expected_ids is None or r.resumed_ids is None for r in results):
        return []
    expected = {r.rank: Counter(r.expected_ids) for r in results}
    resumed = {r.rank: Counter(r.resumed_ids) for r in results}
    lines = []
    lost_all = sum(expected.values(), Counter()) - sum(resumed.values(), Counter())
    repeated_all = sum(resumed.values(), Counter()) - sum(expected.values(), Counter())
    for r in results:
        lost = expected[r.rank] - resumed[r.rank]
        extra = resumed[r.rank] - expected[r.rank]
        if lost:
            lines.append(f"rank {r.rank} lost {id_list(lost)} that its uninterrupted run yields")
        if extra:
            # Samples this rank never yields but another does: it resumed that rank's position.
            foreign = [i for i in extra if not expected[r.rank][i]]
            owners = sorted({q for q in expected if q != r.rank and any(expected[q][i] for i in foreign)})
            whose = (f", which the uninterrupted run gives to rank{'s' if len(owners) > 1 else ''} "
                     f"{', '.join(map(str, owners))}" if owners else "")
            lines.append(f"rank {r.rank} yielded {id_list(extra)} more often than its uninterrupted run{whose}")
    if lost_all or repeated_all:
        total = sum(sum(c.values()) for c in expected.values())
        lines.append(f"over all {len(results)} ranks: of the {total} samples the uninterrupted run yields "
                     f"after the checkpoint, lost {id_list(lost_all) if lost_all else 'none'}, "
                     f"repeated {id_list(repeated_all) if repeated_all else 'none'}")
    elif any(not r.exact for r in results):
        lines.append(f"over all {len(results)} ranks the same samples were covered, but not in the "
                     "uninterrupted run's batches and order (or with other field values)")
    return lines


def every_rank_resumed(results: Sequence[RankResume], *, clause_id: str, context: str,
                       refusal: str = "") -> None:
    """Every rank resumed its own stream exactly (or, where ``refusal`` says what may be refused,
    refused); together they lose and repeat nothing."""
    failed = [r for r in results if not r.exact and not (refusal and r.refused)]
    if not failed:
        return
    lines = []
    for r in failed:
        what = r.error if r.error is not None else r.difference
        lines.append(f"rank {r.rank}{f' ({r.via})' if r.via else ''}: " + str(what).replace("\n", "\n  ")
                     + (f"\n  ({r.loaded_from})" if r.loaded_from else ""))
    lines += coverage([r for r in results if not r.refused])
    n = len(results)
    violation = violated(
        clause_id, context=context,
        expected=(f"each of the {n} ranks to resume its own stream exactly from its own saved state{refusal}, "
                  f"and the {n} resumed streams together to cover exactly the samples of the uninterrupted run: "
                  "none lost, none repeated"),
        got=(f"{len(failed)} of {n} ranks {'failed' if any(r.error for r in failed) else 'did not resume exactly'}:"
             "\n  " + "\n  ".join(lines)),
    )
    violation.reproduce_on = failed[0].rank  # type: ignore[attr-defined]
    raise violation


def example_folder(example: Example, clause_id: str) -> Path:
    """The example's files: the same folder on every rank, after a restart and on another world size
    (on one process: the same folder in the sibling process that resumes it).

    Named after the config and the plan as drawn, which every rank shares (each rank runs
    the plan as it takes it on its own epoch lengths).
    """
    root = example.world.workdir if example.world is not None else example.workdir
    assert root is not None, "this executor gives examples no directory"
    key = hashlib.sha1(repr((replace(example.config, rank=0, world_size=1), example.drawn_plan)).encode()).hexdigest()[:12]
    path = root / "examples" / clause_id / key
    path.mkdir(parents=True, exist_ok=True)
    return path
