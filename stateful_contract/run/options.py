"""`CheckOptions`: every option a check takes, in one frozen object, validated in one place.

    >>> options = CheckOptions(profile="dev", clauses=["SC10"], expected_failures={"SC17": "holds a file"})
    >>> report = check(factory, options, seed=3)      # or check(factory, profile="dev", ...)

Every face builds one (docs/architecture.md), so a wrong value raises the same `OptionError`
whichever face gave it, and an expected failure naming no clause is warned about once
(`UnknownClauseWarning`), when the object is built, and noted on the report.
"""

from __future__ import annotations

import dataclasses
import functools
import keyword
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypedDict, get_args

from ..clauses import CLAUSES, default_selection
from ..clauses.distributed import CheckpointLayout
from ..clauses.registry import TIERS, lookup
from ..clauses.trainer_shape import TRAINER_SHAPES, save_points, shape_of
from ..config import ConfigSpace
from ..isolation.supervised import DEFAULT_MEMORY_LIMIT, Isolation
from ..profiles import DEFAULT_PROFILE, PROFILES
from ..repro.epoch_steps import DEFAULT_HOOK
from ..search.plans import Alignment, SavePoints
from ..spellings import NOT_CARRIED, OPTIONS, Hint, size_text

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
    face gives a class the cores the other workers leave idle: `stateful_contract.faces.pytest_plugin.xdist_jobs`)."""
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
    profile: str = DEFAULT_PROFILE
    #: Clause IDs to judge (and what they need); None: every clause of the tiers that apply.
    clauses: Sequence[str] | None = None
    #: Also run the strict tier (beyond StatefulDataLoader's semantics).
    strict: bool = False
    #: Clause ID -> reason, for clauses the loader is known to fail: such a clause that fails is an
    #: expected failure, one that passes an unexpected pass, which fails the check (the list stays current).
    expected_failures: ExpectedFailures = field(default_factory=dict)
    #: The trainer's checkpoint policy: None (checkpoints anywhere), ``"epoch"`` (only at epoch ends, after
    #: the pass's ``StopIteration``), ``"window"`` or a number of batches (digits too, as a command line
    #: writes them): the loader is exact only there, so checkpoints are drawn only there, a clause whose
    #: every checkpoint the policy excludes is not judged, and the report says so (`alignment_of`).
    checkpoint_alignment: Alignment = None
    #: The method the trainer calls on the loader (or its sampler) with the epoch before each one: SC21's loop
    #: calls it (OLMo-core's trainer: ``"reshuffle"``; `stateful_contract.TrainerView` answers to it).
    epoch_hook: str = DEFAULT_HOOK
    #: The part of the configuration space searched (a command line's ``--config-space num_workers=0,2
    #: grad_acc_step=1..8`` is `ConfigSpace.parse`).
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
    #: The trainer keeps the global batch (per-rank batch x ranks) fixed when the world size changes, as
    #: OLMo-core and Megatron do: a world of M ranks resumes with per-rank batch = global / M (SC31, SC32).
    fixed_global_batch: bool = False
    #: The trainer handles ranks with uneven numbers of batches (DDP's ``Join``): SC32 does not apply.
    joins_uneven_inputs: bool = False
    #: How the trainer saves the loader's state on several ranks (SC30): None, every way trainers do;
    #: ``"per-rank-files"``: each rank ``torch.save``s its own file, as MindSpeed-MM does.
    checkpoint_layout: CheckpointLayout | None = None
    #: What the trainer does with its loader (`TRAINER_SHAPES`: ``("loads-fresh",)``, or ``"loads-fresh"`` as a
    #: command line gives it): a clause that judges only calls such a trainer never makes is not judged.
    trainer_shape: Sequence[str] = ()
    #: How the trainer draws batches: ``"module:function"`` (or the function) mapping the loader to the
    #: iterator it consumes (a preloader, say); every batch is then drawn through it and every state taken
    #: from the loader at that instant, as the trainer's save does (docs/quickstart.md, "A preloader").
    consume: str | Callable[[Any], Any] | None = None
    #: The loader's passes never end (it cycles over its data): checked as one endless stream from the start
    #: (an undeclared one is recognised on its first pass); a pass that ends then fails. docs/clauses.md,
    #: "Endless streams".
    endless: bool = False
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
        put("checkpoint_alignment", alignment_of(self.checkpoint_alignment))
        if not (isinstance(self.epoch_hook, str) and self.epoch_hook.isidentifier()
                and not keyword.iskeyword(self.epoch_hook)):
            raise OptionError("epoch_hook", f"takes the name of a method, e.g. 'reshuffle', got {self.epoch_hook!r}")
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
                                             f"least {tier.min_world_size} ranks ({tier.skip_text})")
        for name in ("timeout", "run_timeout"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise OptionError(name, f"takes seconds >= 0 (0: none), got {value!r}")
        for name in ("fixed_global_batch", "joins_uneven_inputs"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(name, f"takes True or False, got {getattr(self, name)!r}")
        if self.checkpoint_layout not in (None, *get_args(CheckpointLayout)):
            raise OptionError("checkpoint_layout", f"takes one of {', '.join(get_args(CheckpointLayout))} or "
                                                   f"None (every layout), got {self.checkpoint_layout!r}")
        try:
            put("trainer_shape", shape_of(self.trainer_shape))
        except (TypeError, ValueError) as e:
            raise OptionError("trainer_shape", str(e) if isinstance(e, ValueError) else
                              f"takes facts of the trainer's shape ({', '.join(TRAINER_SHAPES)}), got "
                              f"{self.trainer_shape!r}") from None
        if self.consume is not None and not (callable(self.consume) or (
                isinstance(self.consume, str) and ":" in self.consume.strip(":"))):
            raise OptionError("consume", "takes 'module:function' (or the function itself): the loader -> the "
                                         f"iterator the trainer draws batches from, got {self.consume!r}")
        if not isinstance(self.endless, bool):
            raise OptionError("endless", f"takes True or False, got {self.endless!r}")
        if self.endless and self.checkpoint_alignment == "epoch":  # declared: no pass ends, so no epoch end
            raise OptionError("checkpoint_alignment", "'epoch' needs passes that end: an endless stream (endless) "
                                                      "has no epoch end to checkpoint at")
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
                warnings.warn(f"{Hint('expected_failures', form='name')} names {key!r}, which is no clause of the "
                              f"contract (known: {', '.join(sorted(known))})", UnknownClauseWarning, stacklevel=4)
        object.__setattr__(self, "unknown_expected", tuple(unknown))
        return out

    def replace(self, **changes: Unpack[CheckKeywords]) -> CheckOptions:
        """These options with ``changes``, validated again (an unknown ID already warned about is not again)."""
        return dataclasses.replace(self, **changes)

    @property
    def declarations(self) -> dict[str, Any]:
        """What the user declared of their trainer, by field name: the clauses that read one get it
        (`Clause.reads`, `Clause.waived_by`)."""
        return {name: getattr(self, name) for name in DECLARATIONS}

    @property
    def save_points(self) -> SavePoints:
        """Where the trainer saves, as the checkpoint policy and the trainer's shape declare it: every plan of
        the check draws its checkpoints there."""
        return save_points(self.checkpoint_alignment, self.trainer_shape)

    @property
    def declared_notes(self) -> list[str]:
        """What the report says of each declaration given (``declared: ...``)."""
        return [f"declared: {text.format(value=', '.join(value) if isinstance(value, tuple) else value)}"
                for name, text in DECLARATIONS.items() if (value := getattr(self, name)) not in (None, False, ())]

    def carried(self, seed: int | None = None) -> dict[str, list[str]]:
        """What a printed rerun of this check gives again: each option that changes what it judges (every one of
        `spellings.OPTIONS` but `spellings.NOT_CARRIED`), set away from its default, as its command-line words,
        by keyword: ``{"profile": ["--profile", "dev"], "timeout": ["--timeout", "30"]}``. ``seed``: the one the
        search drew where these options left it to the profile. A consumption given as a function has no words
        (a multi-rank check, the only one that prints reruns, takes its ``module:function``)."""
        default = _default_options()
        carried: dict[str, list[str]] = {}
        for name, option in OPTIONS.items():
            value = seed if name == "seed" and self.seed is None else getattr(self, name)
            if name in NOT_CARRIED or value == getattr(default, name) or callable(value):
                continue
            flag = option.flag
            if isinstance(value, bool) or name == "isolation":  # a switch: --strict, --in-process
                words = [flag] if value in (True, "in-process") else []
            elif isinstance(value, Mapping):  # the expected failures: ID=REASON each
                words = [word for cid, reason in value.items() for word in (flag, f"{cid}={reason}")]
            elif isinstance(value, ConfigSpace):
                words = [flag, *value.as_items()] if value.as_items() else []
            elif isinstance(value, tuple):  # the trainer's shape: one fact a flag
                words = [word for fact in value for word in (flag, str(fact))]
            elif name == "memory_limit":
                words = [flag, "none" if value is None else size_text(value)]
            elif isinstance(value, float):
                words = [flag, f"{value:g}"]
            else:
                words = [flag, str(value)]
            if words:
                carried[name] = words
        return carried

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
    epoch_hook: str
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
    fixed_global_batch: bool
    joins_uneven_inputs: bool
    checkpoint_layout: CheckpointLayout | None
    trainer_shape: Sequence[str]
    consume: str | Callable[[Any], Any] | None
    endless: bool


#: The fields of `CheckOptions` that declare how the user's trainer runs (`CheckOptions.declarations`), and
#: what each says on the report when given.
DECLARATIONS = {
    "fixed_global_batch": "the trainer keeps the global batch fixed when the world size changes: SC31 and SC32 "
                          "resume M ranks with per-rank batch = global / M",
    "joins_uneven_inputs": "the trainer handles ranks with uneven batch counts (DDP's Join): SC32 does not apply",
    "checkpoint_layout": "the trainer saves the loader's state as {value}: SC30 judges that layout alone",
    "trainer_shape": "the trainer's shape is {value}: a clause that judges only calls such a trainer never makes "
                     "is not judged, and says why, and no checkpoint is drawn where such a trainer never saves",
}


@functools.cache
def _default_options() -> CheckOptions:
    """The options of a check given none (what `CheckOptions.carried` leaves out)."""
    return CheckOptions()


def _whole(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def alignment_of(value: object) -> Alignment:
    """The checkpoint policy, as every face gives it (the one place it is read): None, ``"epoch"``,
    ``"window"``, or a whole number of batches >= 1, as an int or as the digits a command line or a report
    writes; `OptionError` otherwise."""
    if isinstance(value, str):
        value = int(value) if value.strip().isdigit() else value.strip().lower()
    if value is None or value in ("epoch", "window") or _whole(value, 1):
        return value  # type: ignore[return-value]
    raise OptionError("checkpoint_alignment", "takes 'epoch' (checkpoints only at epoch ends), 'window' (only at "
                                              f"grad-acc window boundaries) or a whole number of batches >= 1, got {value!r}")
