"""What happened to a multi-rank run, and which rank's failure was the cause.

When one rank dies, the others fail too, on their broken gloo connections, or are stopped by the checker,
and the first to exit is often one that failed *because* another had died. So the checker records every
rank's exit code and time (`launch.Phase`), and `order_failures` names the cause first.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..processes import death, describe_exit, growth, hang, no_answer

__all__ = ["COMMUNICATION", "KILLED", "OWN", "STOPPED", "LaunchOutcome", "RankFailure", "order_failures"]

#: What a rank's error says when it failed because another rank went away (its gloo
#: connection broke, a collective timed out waiting for it, the store was gone): lower case.
COMMUNICATION_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe",
                        "connection refused", "timed out", "gloo/transport", "distbackenderror",
                        "distnetworkerror", "diststoreerror")
#: Signals a rank is stopped with from outside: by the checker once another failed (SIGKILL), by a user's
#: launcher (SIGTERM, SIGINT, SIGHUP).
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP})

#: How a failure relates to the others (`order_failures`), from most to least likely the cause.
OWN, KILLED, COMMUNICATION, STOPPED = "own", "killed", "communication", "stopped"
_KINDS = (OWN, KILLED, COMMUNICATION, STOPPED)
#: Why a rank stopped by a signal failed, said after the cause.
_STOPPED_BY = {STOPPED: "stopped by the checker once a rank had failed", KILLED: "stopped by a signal"}


@dataclass
class RankFailure:
    """One rank that did not finish its phase."""

    rank: int
    phase: str
    exitcode: int
    error: str
    doing: str
    stderr_tail: str = ""
    #: When it exited (``time.time()``), as the checker saw it; None when not known.
    exited_at: float | None = None
    #: `OWN`, `KILLED`, `COMMUNICATION` or `STOPPED`: set by `order_failures`, judged against the others.
    kind: str = OWN
    #: It was inside a call into the loader when it ended (its status log): an exit is the loader's doing.
    in_loader: bool = True

    @property
    def killed_by(self) -> str:
        """``"SIGSEGV"``, ``"exit code 7"``, ... (as in a report's ``killed_by``)."""
        return describe_exit(self.exitcode)[0]

    @property
    def how(self) -> str:
        return describe_exit(self.exitcode)[1]

    def describe(self) -> str:
        during = f" in the {self.phase} phase, while {self.doing or 'starting up'}"
        text = death(self.exitcode, f"rank {self.rank}", during, self.error, self.in_loader)[1]
        if self.stderr_tail:
            text += "\n  last lines of its stderr:\n    " + "\n    ".join(self.stderr_tail.splitlines())
        return text

    def describe_consequence(self) -> str:
        """One line for a failure that followed the cause."""
        if self.kind == OWN:
            return "then " + self.describe()
        if self.kind in _STOPPED_BY:
            return f"then rank {self.rank} {self.how} ({_STOPPED_BY[self.kind]})"
        first = next((line.strip() for line in self.error.splitlines() if line.strip()), "")
        short = first if len(first) <= 160 else first[:157] + "..."
        return f"then rank {self.rank} {self.how} (its communication with the other ranks failed: {short})"


def _kind(failure: RankFailure, others: Sequence[RankFailure]) -> str:
    """Whether ``failure`` is its rank's own, or a consequence of another rank's (see `order_failures`)."""
    text = failure.error.lower()
    signalled = "got signal" in text or (failure.exitcode is not None and failure.exitcode < 0
                                         and -failure.exitcode in STOP_SIGNALS)
    if signalled:
        # The checker stops ranks only after it saw another exit: one killed no later than
        # every other (the OOM killer, a user's kill) was not stopped by it.
        when = failure.exited_at
        later = when is not None and any(o.exited_at is not None and o.exited_at < when for o in others)
        return STOPPED if later else KILLED
    if any(pattern in text for pattern in COMMUNICATION_ERRORS):
        return COMMUNICATION
    return OWN


def order_failures(failures: Sequence[RankFailure]) -> list[RankFailure]:
    """The failures, the cause first, then the others in the order they exited. Exit times alone do not
    settle it (a rank that raised may exit after the rank it failed because of; times may be unknown or
    whole seconds), so the cause is the first by kind (`_KINDS`: died or raised on its own; killed by a stop
    signal no later than the others exited, as by the OOM killer; its communication broke; stopped after
    another exited), then by exit, then by rank: never by the order the failures arrived in."""
    failures = list(failures)
    if not failures:
        return []
    for f in failures:
        f.kind = _kind(f, [o for o in failures if o is not f])
    cause = min(failures, key=lambda f: (_KINDS.index(f.kind), f.exited_at or math.inf, f.rank))
    return [cause, *sorted((f for f in failures if f is not cause), key=lambda f: (f.exited_at or math.inf, f.rank))]


@dataclass
class LaunchOutcome:
    """What happened to the ranks: from the checker's record of its ranks, or (``in_world``) as rank 0 of the
    user's launcher's world sees it (`InWorld`): no exit codes, but the ranks ``gone`` from this host and its
    collective's ``error``."""

    #: The ranks that failed, the cause first (`order_failures`).
    failures: list[RankFailure] = field(default_factory=list)
    timed_out: bool = False
    timeout: float = 0.0
    #: The seconds one command may take, when that ran out rather than the run's ``timeout`` (`RankExecutor.wait`).
    command_limit: float | None = None
    #: Rank statuses at the end (what each was doing when the run ended or was killed).
    doing: dict[int, str] = field(default_factory=dict)
    #: The run was killed because this rank's example timeout had passed unanswered: (rank, timeout, waited).
    hung: tuple[int, float, float] | None = None
    #: ... or because the ranks' processes grew past the memory limit: (rank, grown, limit).
    memory: tuple[int, int, int] | None = None
    #: Each rank's reproduction of the example it was in, up to where it stopped (status logs).
    programs: dict[int, str] = field(default_factory=dict)
    in_world: bool = False
    #: In-world: the ranks whose process on this host has ended.
    gone: list[int] = field(default_factory=list)
    error: str = ""
    #: What ranks had answered when the run was given up on, by rank (`RankExecutor.left_behind` reads it).
    answered: dict[int, Any] = field(default_factory=dict)

    @property
    def rank(self) -> int:
        """The rank to blame: the hung or grown one, else the cause among the failures (0: none known)."""
        if found := self.hung or self.memory:
            return found[0]
        return self.failures[0].rank if self.failures else next(iter(self.gone), 0)

    @property
    def killed_by(self) -> str:
        if self.memory is not None:
            return "memory limit"
        if self.hung is not None or self.timed_out:
            return "timeout"
        return self.failures[0].killed_by if self.failures else ""

    def where_each_rank_was(self, cause: str) -> str:
        """``cause``, then what each rank was doing, one line each."""
        return "\n".join([f"{cause} Where each rank was:",
                          *(f"  rank {r}: {d or 'starting up'}" for r, d in sorted(self.doing.items()))])

    def describe(self) -> str:
        """Why the run did not finish, one rank per line."""
        if self.hung is not None:
            rank, timeout, waited = self.hung
            then = (f"; after {waited:.1f} s rank 0 stopped waiting, reported, and exits, and the launcher stops "
                    "the other ranks." if self.in_world else
                    f", so the checker killed the run, every rank and its workers, after {waited:.1f} s.")
            return self.where_each_rank_was(hang(timeout, f"rank {rank}", then=then))
        if self.memory is not None:
            rank, grown, limit = self.memory
            return self.where_each_rank_was(growth(grown, limit, f"rank {rank}'s processes", " during the example",
                                                 "; the checker killed the run."))
        if self.command_limit is not None:
            return self.where_each_rank_was(no_answer(self.command_limit, "the ranks", then="; " + (
                "rank 0 stopped waiting." if self.in_world else "the checker killed the run (with all its processes).")))
        if self.timed_out:  # the run's own limit: in-world, `wait` has none (it said hung or command_limit above)
            return self.where_each_rank_was(f"the {len(self.doing)}-rank run did not finish within {self.timeout:g} "
                                            "s and was killed (with all its processes).")
        if self.in_world:
            gone = ", ".join(map(str, self.gone))
            lost = (f"rank {gone}'s process ended (found on this host)" if gone else
                    "another rank went away (its process ended or lost its connection; the launcher's error "
                    "summary names it)")
            return self.where_each_rank_was(f"{lost}, and rank 0's collective with it failed ({self.error}).")
        if self.failures:
            cause, *after = order_failures(self.failures)
            return "\n".join([cause.describe(), *(f.describe_consequence() for f in after)])
        return self.where_each_rank_was("a rank's connection to the checker closed with no failure recorded.")
