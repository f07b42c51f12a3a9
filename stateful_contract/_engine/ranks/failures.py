"""What happened to a multi-rank run, and which rank's failure was the cause.

When one rank dies, the others fail too, on their broken gloo connections
("Connection reset by peer"), and torch's launcher reports only the rank its monitor
happened to notice first: for function entrypoints ``ChildFailedError.failures`` holds
a single rank, and when several are dead by the monitor's next poll it is the lowest
local rank, usually one that failed *because* another had died. The launcher therefore
records every rank's exit itself (`stateful_contract._engine.ranks.launcher`), and
`order_failures` names as the cause the failure that is not a consequence of another (a
rank that died on its own, or raised an error of its own, comes before a rank whose
communication broke, which comes before a rank the launcher stopped), the earliest
among those, and lists the rest after it as what followed.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..processes import describe_exit

__all__ = ["COMMUNICATION", "KILLED", "OWN", "STOPPED", "LaunchOutcome", "RankFailure", "order_failures"]

#: Seconds the agent gives a rank to exit after SIGTERM before SIGKILL, once another failed.
SHUTDOWN_GRACE = 5

#: What a rank's error says when it failed because another rank went away (its gloo
#: connection broke, a collective timed out waiting for it, the store was gone): lower case.
COMMUNICATION_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe",
                        "connection refused", "timed out", "gloo/transport", "distbackenderror",
                        "distnetworkerror", "diststoreerror")
#: Signals a rank is stopped with from outside: by the launcher once another rank failed
#: (SIGTERM, then SIGKILL after `SHUTDOWN_GRACE`), or when the launcher dies (SIGINT, the
#: ranks' parent-death signal).
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGKILL, signal.SIGINT, signal.SIGHUP})

#: How a failure relates to the others (`order_failures`), from most to least likely the cause.
OWN, KILLED, COMMUNICATION, STOPPED = "own", "killed", "communication", "stopped"
_KIND_ORDER = {OWN: 0, KILLED: 1, COMMUNICATION: 2, STOPPED: 3}


@dataclass
class RankFailure:
    """One rank that did not finish its phase."""

    rank: int
    phase: str
    exitcode: int | None
    error: str
    doing: str
    stderr_tail: str = ""
    #: When it exited (``time.time()``), as the launcher saw it; None when not known.
    exited_at: float | None = None
    #: `OWN`, `KILLED`, `COMMUNICATION` or `STOPPED`: set by `order_failures`, judged against the others.
    kind: str = OWN

    @property
    def killed_by(self) -> str:
        """``"SIGSEGV"``, ``"exit code 7"``, ... (as in a report's ``killed_by``)."""
        return describe_exit(self.exitcode)[0] if self.exitcode is not None else "exit code None"

    @property
    def how(self) -> str:
        return describe_exit(self.exitcode)[1] if self.exitcode is not None else "exited with code None"

    def describe(self) -> str:
        text = f"rank {self.rank} {self.how} in the {self.phase} phase, while {self.doing or 'starting up'}"
        if self.error:
            text += f": {self.error}"
        if self.stderr_tail:
            text += "\n  last lines of its stderr:\n    " + "\n    ".join(self.stderr_tail.splitlines())
        return text

    def describe_consequence(self) -> str:
        """One line for a failure that followed the cause."""
        if self.kind == OWN:
            return "then " + self.describe()
        if self.kind == STOPPED:
            return f"then rank {self.rank} {self.how} (stopped by the launcher once a rank had failed)"
        if self.kind == KILLED:
            return f"then rank {self.rank} {self.how} (stopped by a signal)"
        first = next((line.strip() for line in self.error.splitlines() if line.strip()), "")
        short = first if len(first) <= 160 else first[:157] + "..."
        return f"then rank {self.rank} {self.how} (its communication with the other ranks failed: {short})"


def _kind(failure: RankFailure, others: Sequence[RankFailure]) -> str:
    """Whether ``failure`` is its rank's own, or a consequence of another rank's (see `order_failures`)."""
    text = failure.error.lower()
    signalled = "got signal" in text or (failure.exitcode is not None and failure.exitcode < 0
                                         and -failure.exitcode in STOP_SIGNALS)
    if signalled:
        # The launcher stops ranks only after it saw another exit: one killed no later than
        # every other (the OOM killer, a user's kill) was not stopped by it.
        when = failure.exited_at
        later = when is not None and any(o.exited_at is not None and o.exited_at < when for o in others)
        return STOPPED if later else KILLED
    if any(pattern in text for pattern in COMMUNICATION_ERRORS):
        return COMMUNICATION
    return OWN


def order_failures(failures: Sequence[RankFailure]) -> list[RankFailure]:
    """The failures with the cause first, then the others in the order they exited.

    Exit times alone do not settle it: a rank that raised may exit after the rank it
    failed because of or in the same poll of the launcher, or times may be unknown or
    whole seconds. So each failure is first judged against the others (its ``kind``), and
    the cause is, in this order: a rank that died or raised on its own (`OWN`:
    ``os._exit``, a crash signal, an error that is not about communication); a rank
    killed by a stop signal (SIGTERM, SIGKILL...) no later than the others exited
    (`KILLED`: the OOM killer, say); a rank whose communication with the others broke
    (`COMMUNICATION`: "Connection reset by peer", a timeout); a rank stopped by a signal
    after another had exited (`STOPPED`: the launcher shutting the run down). Among
    failures of the same kind the earliest exit is the cause; equal or unknown times go
    to the lowest rank, so the verdict never depends on the order the failures arrived in.
    """
    failures = list(failures)
    for f in failures:
        f.kind = _kind(f, [o for o in failures if o is not f])

    def when(f: RankFailure) -> float:
        return math.inf if f.exited_at is None else f.exited_at

    if not failures:
        return []
    cause = min(failures, key=lambda f: (_KIND_ORDER[f.kind], when(f), f.rank))
    return [cause, *sorted((f for f in failures if f is not cause), key=lambda f: (when(f), f.rank))]


@dataclass
class LaunchOutcome:
    """What happened to the launched phases."""

    phases_done: list[str]
    failed_phase: str | None = None
    #: The ranks that failed, the cause first (`order_failures`).
    failures: list[RankFailure] = field(default_factory=list)
    timed_out: bool = False
    timeout: float = 0.0
    #: Rank statuses at the end (what each was doing when the run ended or was killed).
    doing: dict[int, str] = field(default_factory=dict)
    launcher_log: str = ""
    #: The supervisor killed the run because this rank's example timeout had passed and the
    #: rank did not answer: (rank, example timeout, seconds waited).
    hung: tuple[int, float, float] | None = None
    #: ... or because the ranks' processes grew past the memory limit: (rank, grown, limit).
    memory: tuple[int, int, int] | None = None
    #: Each rank's reproduction of the example it was in, up to where it stopped (status logs).
    programs: dict[int, str] = field(default_factory=dict)
    #: The phases started again because their ranks could not form their group (`world.JOIN_TIMEOUT`).
    joins_retried: list[str] = field(default_factory=list)

    @property
    def killed_by(self) -> str:
        if self.memory is not None:
            return "memory limit"
        if self.hung is not None or self.timed_out:
            return "timeout"
        return self.failures[0].killed_by if self.failures else ""

    @property
    def launcher_error(self) -> str:
        return "" if self.failed_phase or self.timed_out or "LAUNCHER-OK" in self.launcher_log else (
            self.launcher_log.strip()[-2000:] or "the launcher exited without a word")

    def where_each_rank_was(self, cause: str) -> str:
        """``cause``, then one line per rank saying what it was doing (from the status boards)."""
        return "\n".join([f"{cause} Where each rank was:",
                          *(f"  rank {r}: {d or 'starting up'}" for r, d in sorted(self.doing.items()))])

    def hung_rank(self, aftermath: str) -> str:
        """A rank that overran its example and stopped answering; ``aftermath`` ({waited}) says what followed."""
        assert self.hung is not None
        rank, timeout, waited = self.hung
        return self.where_each_rank_was(
            f"rank {rank} did not finish its example within {timeout:g} s and stopped answering: the timeout "
            "could not interrupt it (SIGALRM blocked, or native code that never returns to Python)"
            f"{aftermath.format(waited=waited)}")

    def describe(self) -> str:
        """Why the run did not finish, one rank per line."""
        if self.hung is not None:
            return self.hung_rank(", so the checker killed the run, every rank and its workers, after {waited:.1f} s.")
        if self.memory is not None:
            rank, grown, limit = self.memory
            return self.where_each_rank_was(
                f"rank {rank}'s processes grew by {grown / (1 << 20):.0f} MiB during the example, over the memory "
                f"limit of {limit / (1 << 20):.0f} MiB; the checker killed the run.")
        if self.timed_out:
            return self.where_each_rank_was(f"the {len(self.doing)}-rank run did not finish within {self.timeout:g} s "
                                            "and was killed (with all its processes).")
        if self.failures:
            cause, *after = order_failures(self.failures)
            return "\n".join([cause.describe(), *(f.describe_consequence() for f in after)])
        return f"the launcher failed: {self.launcher_error}"
