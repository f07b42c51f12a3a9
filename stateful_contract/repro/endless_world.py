"""SC31 on an endless stream: a state saved on N ranks, resumed on M, counted global epoch by global epoch.

An endless stream shows no pass end to count the samples still due to, but a trainer that keeps its global batch
when the world changes (declared: ``fixed_global_batch``; Megatron-LM's cyclic loader, OLMo-core) takes the same
samples per global step on any world. The saving world's global stream (step k: every rank's batch k, as a
multiset) is the uninterrupted reference; an epoch of it is the `epoch_steps` global steps after which it deals
the same samples again. The new world's global steps after the resume are cut where the saving world's epochs end
(the rest of the interrupted epoch, then whole epochs) and each stretch must hold, as a multiset, what the saving
world's holds: the samples of the interrupted epoch not yet consumed, then each whole epoch's (or, an epoch not yet
begun, what a fresh world of the new size deals in it). Order inside a stretch is free; a sample lost or repeated
shows. Where no cut is defined (the saving world's stream repeats no epoch, or the two worlds' epochs take other
numbers of global steps) the example is not judged, saying why. Why: docs/clauses.md, SC31.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..terms import NOT_JUDGED_ON_ENDLESS
from .impact import Impact, losses
from .multisets import Tally, id_list, tally

__all__ = ["WorldVerdict", "epoch_steps", "global_steps", "horizon", "horizon_of", "judge_endless_world"]

#: Ids per batch of one rank's stream.
Steps = list[list[int]]


def global_steps(ranks: Sequence[Steps]) -> list[Counter[int]]:
    """The world's global steps: step k holds every rank's batch k (as far as every rank yielded one)."""
    return [sum((Counter(r[k]) for r in ranks), Counter()) for k in range(min(map(len, ranks), default=0))]


def epoch_steps(steps: Sequence[Counter[int]]) -> int | None:
    """How many global steps an epoch of this stream takes: the fewest after which it deals the same samples again,
    window after window from its start (at least two whole windows, each holding every sample the stream yields:
    no fewer steps can hold them all); None where none does (a stream that drops other samples every epoch)."""
    everything = set().union(*steps) if steps else set()

    def repeats(e: int) -> bool:
        windows = [set().union(*steps[k:k + e]) for k in range(0, len(steps) - e + 1, e)]
        return len(windows) >= 2 and all(w == everything for w in windows)

    return next((e for e in range(1, len(steps) // 2 + 1) if repeats(e)), None)


def horizon(saved_steps: int, at: int, epoch: int) -> int:
    """The global steps a new world takes after a resume at step ``at`` of a saving world whose reference has
    ``saved_steps`` and whose epochs take ``epoch``: the rest of the interrupted epoch and every whole one after."""
    rest = epoch - at % epoch
    return rest + (saved_steps - at - rest) // epoch * epoch


def horizon_of(saved: Sequence[Counter[int]], at: int) -> int:
    """`horizon` of the saving world's global steps (all it had left where it repeats no epoch: not judged)."""
    epoch = epoch_steps(saved)
    return len(saved) - at if epoch is None else horizon(len(saved), at, epoch)


@dataclass
class WorldVerdict:
    """What a world-change judgement (`judge_endless_world`, `world_change.judge_finite_world`) found: nothing (it
    held), why it could not judge (``skipped``), or a failure's lines and impact."""

    skipped: str = ""
    lines: list[str] = field(default_factory=list)
    impact: Impact | None = None
    #: The interrupted epoch of the saving world's global stream, for the message.
    epoch: int = 0

    def told(self, saved: int, resumed: int, where: str) -> tuple[str, str]:
        """A failure's context and expectation, for ``saved`` ranks that checkpointed ``where``."""
        ranks = f"{resumed} rank{'s' if resumed != 1 else ''}"
        return ((f"every one of {saved} ranks checkpointed {where} and saved its state with torch.save to "
                 f"rank{{r}}.pt; a fresh world of {ranks} resumed, rank r loading rank{{r % {saved}}}.pt, with the "
                 "global batch kept (declared), and took the global steps the saving world's uninterrupted stream "
                 "had left, to the end of an epoch"),
                (f"the resume on {ranks} to be refused before its first batch, or the {resumed}-rank world's global "
                 f"steps to hold, epoch by epoch of the {saved}-rank world's global stream, what it holds: the "
                 "samples of the interrupted epoch not yet consumed, then each whole epoch's (or what a fresh "
                 f"{resumed}-rank world deals in it), in any order: none lost, none repeated"))


def _pads(steps: Sequence[Counter[int]], epoch: int) -> int:
    """The most copies beyond the first a world's epoch deals of its samples (its padding)."""
    windows = [sum(steps[k:k + epoch], Counter()) for k in range(0, len(steps) - epoch + 1, epoch)]
    return max((sum(w.values()) - len(w) for w in windows), default=0)


def judge_endless_world(saved: Sequence[Steps], resumed: Sequence[Steps], fresh: Sequence[Steps] | None, *,
                        at: int) -> WorldVerdict:
    """The new world's global steps after a resume at step ``at`` against the saving world's, stretch by stretch
    (module docstring). ``saved``, ``resumed``, ``fresh``: per rank, ids per batch of the saving world's
    uninterrupted stream, the new world's after the resume, and a fresh new world's (None: not taken)."""
    old = global_steps(saved)
    epoch = epoch_steps(old)
    if epoch is None:
        return WorldVerdict(skipped=(
            f"{NOT_JUDGED_ON_ENDLESS}: it deals other samples every epoch (no window of global steps repeats its "
            "samples), so the resumed world's steps cannot be cut into epochs to count what is due in each; SC31 "
            "did not judge those examples"))
    ahead = global_steps(fresh) if fresh else []
    fresh_epoch = epoch_steps(ahead) if ahead else None
    if fresh_epoch is not None and fresh_epoch != epoch:
        return WorldVerdict(skipped=(
            f"{NOT_JUDGED_ON_ENDLESS}: a fresh world of {len(resumed)} ranks takes {fresh_epoch} global steps an "
            f"epoch where the {len(saved)}-rank world took {epoch}, and nothing in an endless stream marks where the "
            "resumed world's epoch ends; SC31 did not judge those examples"))
    interrupted, rest = divmod(at, epoch)
    new = global_steps(resumed)
    steps = horizon(len(old), at, epoch)
    padding = _pads(ahead, epoch) if ahead else 0
    cuts = [0, epoch - rest, *range(2 * epoch - rest, steps + 1, epoch)]
    lines, lost, repeated = [], Counter[int](), Counter[int]()
    for k, (a, b) in enumerate(itertools.pairwise(cuts)):
        got = sum(new[a:b], Counter())
        e = interrupted + k
        mine = sum(old[e * epoch:(e + 1) * epoch], Counter())
        if k == 0:
            t = tally([mine], sum(old[e * epoch:at], Counter()), got, padding=padding, resharded=True)
            name = f"{'the rest of ' if rest else ''}epoch {e} ({_steps(at + 1, (e + 1) * epoch)})"
        else:
            theirs = sum(ahead[e * epoch:(e + 1) * epoch], Counter()) if len(ahead) >= (e + 1) * epoch else None
            ways = [tally([w], Counter(), got, padding=padding, resharded=True) for w in (mine, theirs) if w]
            t = min(ways, key=lambda w: (not w.exact, sum(w.lost.values()) + sum(w.repeated.values())))
            name = f"epoch {e} ({_steps(e * epoch + 1, (e + 1) * epoch)})"
        if t.exact:
            continue
        lost, repeated = lost + t.lost, repeated + t.repeated + _beyond(t)
        lines.append(f"{name}: the {len(resumed)}-rank world yielded {id_list(got) if got else 'nothing'}; "
                     f"lost {id_list(t.lost) if t.lost else 'none'}, repeated "
                     f"{id_list(t.repeated + _beyond(t)) if t.repeated or _beyond(t) else 'none'}")
    short = [f"rank {r} yielded {len(s)} of the {steps} batches of the horizon: its stream ended"
             for r, s in enumerate(resumed) if len(s) < steps]
    if not lines and not short:
        return WorldVerdict()
    cost = (Impact("loud", "the resumed endless stream ended: the trainer's next() raises StopIteration",
                   where="next()") if short else losses(sum(lost.values()), sum(repeated.values()), epoch=interrupted))
    return WorldVerdict(lines=short + lines + [
        f"over the {steps} global steps after the resume: lost {id_list(lost) if lost else 'none'}, repeated "
        f"{id_list(repeated) if repeated else 'none'}; an epoch is {epoch} global steps of {len(saved)} ranks"
        + (f", and a fresh {len(resumed)}-rank world's padding may add {padding} cop{'ies' if padding != 1 else 'y'}"
           if padding else ""),
        *([] if short or not (lost or repeated) else [
            "what it costs: after an elastic restart (or a job resumed on fewer or more nodes) the lost samples are "
            "not trained in their epoch and the repeated ones are trained twice; nothing in the loss shows it"])],
        impact=cost, epoch=interrupted)


def _steps(first: int, last: int) -> str:
    """``global steps 3 to 4``, or ``global step 4`` where the stretch is one step (a resume one step before an
    epoch ends)."""
    return f"global step {last}" if first == last else f"global steps {first} to {last}"


def _beyond(t: Tally) -> Counter[int]:
    """Copies only the new world's padding could explain, past what it may add: repeats too."""
    return t.extra if sum(t.extra.values()) > t.padding else Counter()
