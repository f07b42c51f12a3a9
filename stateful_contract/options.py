"""`CheckOptions`: every option a check takes, in one frozen object, validated in one place.

    >>> options = CheckOptions(profile="dev", clauses=["SC10"], expected_failures={"SC17": "holds a file"})
    >>> report = check(factory, options, seed=3)      # or check(factory, profile="dev", ...)

Every face builds one (docs/architecture.md), so a wrong value raises the same `OptionError`
whichever face gave it, and an expected failure naming no clause is warned about once
(`UnknownClauseWarning`), when the object is built, and noted on the report.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypedDict, get_args

from ._engine.plans import Alignment
from ._engine.supervised import DEFAULT_MEMORY_LIMIT, Isolation
from ._faces import hint_expected_failures, in_face
from .clauses import CLAUSES, default_selection
from .clauses.registry import TIERS, lookup
from .config import ConfigSpace
from .profiles import PROFILES

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["XDIST_WORKER_ENV", "CheckKeywords", "CheckOptions", "ExpectedFailures", "OptionError",
           "UnknownClauseWarning", "cores", "default_jobs"]

#: The one form of expected failures: clause ID -> why the loader is known to fail it.
ExpectedFailures = Mapping[str, str]

#: Set by pytest-xdist in each of its workers: they already share the cores, one job each.
XDIST_WORKER_ENV = "PYTEST_XDIST_WORKER"


def default_jobs() -> int:
    """Every core this process may run on; one under pytest-xdist, whose workers share them already (the pytest
    face gives a class the cores the other workers leave idle: `stateful_contract.pytest_plugin.xdist_jobs`)."""
    return 1 if os.environ.get(XDIST_WORKER_ENV) else cores()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity off Linux
        return max(1, os.cpu_count() or 1)


class OptionError(ValueError):
    """An option with a value no check can take; ``option`` is its `CheckOptions` field."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option} {problem}")
        self.option = option
        self.problem = problem


class UnknownClauseWarning(UserWarning):
    """An expected failure names no clause of the contract (a typo, or a clause not yet released)."""


@dataclass(frozen=True)
class CheckOptions:
    """Every option of a check (`stateful_contract.check`); each face builds one, `replace` a changed copy."""

    #: ``"dev"``, ``"ci"`` (derandomized, the default) or ``"thorough"``.
    profile: str = "ci"
    #: Clause IDs to judge (and what they need); None: every clause of the tiers that apply.
    clauses: Sequence[str] | None = None
    #: Also run the strict tier (beyond StatefulDataLoader's semantics).
    strict: bool = False
    #: Clause ID -> reason, for clauses the loader is known to fail: such a clause that fails is an
    #: expected failure, one that passes an unexpected pass, which fails the check (the list stays current).
    expected_failures: ExpectedFailures = field(default_factory=dict)
    #: None (checkpoints anywhere), ``"window"`` or a number of batches: the loader is exact only
    #: there, so checkpoints are drawn only there, and the report says so.
    checkpoint_alignment: Alignment = None
    #: The part of the configuration space searched.
    space: ConfigSpace = field(default_factory=ConfigSpace)
    #: Ranks of torch.distributed (gloo) every example runs on at once; more than one adds the
    #: multi-rank clauses.
    world_size: int = 1
    #: Seconds one example may take (None: the profile's; 0: no limit).
    timeout: float | None = None
    #: Seconds a multi-rank run may take (None: `stateful_contract.distributed.default_run_timeout`).
    run_timeout: float | None = None
    #: Bytes the loader's processes may gain during one example (None: no limit; supervised only).
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT
    #: ``"supervised"`` (the default where ``os.fork`` exists: a loader that kills its process, hangs
    #: where ``timeout`` cannot interrupt it or passes ``memory_limit`` fails the clause it was running,
    #: and the check goes on in a fresh child) or ``"in-process"`` (a little faster, and what a
    #: debugger needs, but such a loader then takes the check down with it). See docs/supervision.md.
    isolation: Isolation | None = None
    #: Parallel processes the searched clauses nothing else needs are judged in (None: `default_jobs`;
    #: one rank only); the report notes the speed-up, the verdicts do not depend on it.
    jobs: int | None = None
    #: Seeds the search (recorded on the report; None: the profile decides, `Profile.draw_seed`).
    seed: int | None = None
    #: Stop at the first clause that fails (the likeliest to fail, and cheapest, run first:
    #: `Clause.priority`); the clauses not run are reported as not judged (`Report.stopped_at`).
    exitfirst: bool = False
    #: Keeps a multi-rank run's files (states, checkpoints, rank logs) there.
    run_dir: str | Path | None = None
    #: How the trainer draws batches: ``"module:function"`` (or the function) mapping the loader to the
    #: iterator it consumes (a preloader, say); every batch is then drawn through it and every state taken
    #: from the loader at that instant, as the trainer's save does (docs/quickstart.md, "A preloader").
    consume: str | Callable[[Any], Any] | None = None
    #: Expected failures given that name no clause: warned about once, when given, and left out.
    unknown_expected: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        for name, choices in (("profile", tuple(PROFILES)), ("isolation", get_args(Isolation))):
            value = getattr(self, name)
            if value not in choices and not (name == "isolation" and value is None):
                raise OptionError(name, f"takes one of {', '.join(choices)}, got {value!r}")
        if self.clauses is not None:
            given = self.clauses.split(",") if isinstance(self.clauses, str) else self.clauses
            try:
                put("clauses", tuple(lookup(c.strip()).id for c in given if c.strip()))
            except KeyError as e:
                raise OptionError("clauses", f"names an {e.args[0]}") from None
        put("expected_failures", MappingProxyType(self._expected(self.expected_failures)))
        alignment = self.checkpoint_alignment
        if not (alignment is None or alignment == "window" or _whole(alignment, 1)):
            raise OptionError("checkpoint_alignment",
                              f"takes 'window' or a whole number of batches >= 1, got {alignment!r}")
        if self.jobs is None:
            put("jobs", default_jobs())
        for name, least, takes in (("world_size", 1, "a number >= 1"), ("jobs", 1, "a number >= 1"),
                                   ("memory_limit", 1, "a number of bytes >= 1 or None"),
                                   ("seed", 0, "a whole number >= 0")):
            value = getattr(self, name)  # None: no memory limit, the profile's seed
            if not (_whole(value, least) or (value is None and name in ("memory_limit", "seed"))):
                raise OptionError(name, f"takes {takes}, got {value!r}")
        # A clause named explicitly that this world cannot run would otherwise crash in its scenario
        # and read as the loader's failure (SC30 on one process).
        for cid in self.clauses or ():
            tier = TIERS[lookup(cid).tier]
            if self.world_size < tier.min_world_size:
                raise OptionError("clauses", f"names {cid}, a clause of the {tier.name} tier, which needs at "
                                             f"least {tier.min_world_size} ranks ({in_face(tier.skip_text)})")
        for name in ("timeout", "run_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise OptionError(name, f"takes seconds >= 0 (0: none), got {value!r}")
        if self.consume is not None and not (callable(self.consume) or (
                isinstance(self.consume, str) and ":" in self.consume.strip(":"))):
            raise OptionError("consume", "takes 'module:function' (or the function itself): the loader -> the "
                                         f"iterator the trainer draws batches from, got {self.consume!r}")
        if self.space is None:  # what check(space=None) always meant: the whole default space
            put("space", ConfigSpace())
        elif not isinstance(self.space, ConfigSpace):
            raise OptionError("space", f"takes a ConfigSpace, got {type(self.space).__name__}")

    def _expected(self, given: ExpectedFailures | None) -> dict[str, str]:
        """The declarations by clause ID; those naming no clause are warned about (once) and left out."""
        if given is not None and not isinstance(given, Mapping):
            raise OptionError("expected_failures", "takes a mapping of clause ID -> reason, e.g. "
                              f"{{'SC17': 'the state holds a file handle'}}, got {type(given).__name__}")
        known = {c.id for c in CLAUSES}
        out: dict[str, str] = {}
        unknown = list(self.unknown_expected)
        for cid, reason in (given or {}).items():
            key = str(cid).strip().upper()
            if key in known:
                out[key] = str(reason)
            elif key not in unknown:
                unknown.append(key)
                warnings.warn(f"{in_face(hint_expected_failures())} names {key!r}, which is no clause of the "
                              f"contract (known: {', '.join(sorted(known))})", UnknownClauseWarning, stacklevel=4)
        object.__setattr__(self, "unknown_expected", tuple(unknown))
        return out

    def replace(self, **changes: Unpack[CheckKeywords]) -> CheckOptions:
        """These options with ``changes``, validated again (an unknown ID already warned about is not again)."""
        return dataclasses.replace(self, **changes)

    @property
    def selected(self) -> list[str]:
        """The clause IDs the check judges: the named ones, or every clause of the tiers that apply."""
        if self.clauses is None:
            return [c.id for c in default_selection(strict=self.strict, world_size=self.world_size)]
        return list(self.clauses)


class CheckKeywords(TypedDict, total=False):
    """`CheckOptions`' fields as keywords (`check`'s ``**options``), for type checkers."""

    profile: str
    clauses: Sequence[str] | None
    strict: bool
    expected_failures: ExpectedFailures
    checkpoint_alignment: Alignment
    space: ConfigSpace
    world_size: int
    timeout: float | None
    run_timeout: float | None
    memory_limit: int | None
    isolation: Isolation | None
    jobs: int | None
    seed: int | None
    exitfirst: bool
    run_dir: str | Path | None
    consume: str | Callable[[Any], Any] | None


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def alignment_of(text: str | None) -> Any:
    """A checkpoint alignment as a command line or a report writes it: ``window`` or a number of batches."""
    return int(text) if text is not None and text.strip().isdigit() else text
