"""The example limit's clock: the seconds a loader's processes spent running or asleep, not those they spent
waiting in the run queue for a CPU that other processes held.

A starved loader is not a hung one (issue 30): on a machine shared with other jobs, a correct loader's
example can take several times the limit in wall time while its processes wait for a CPU. Per thread of
every process of the loader, Linux says how long it ran and how long it waited to run
(``/proc/PID/task/TID/schedstat``: on-CPU ns, run-queue ns). Over each interval between two readings the
loader is charged

    max(min(dt, ran), dt - min(dt, waited))      (ran, waited: summed over its threads)

so time spent running counts (a spin is caught after the limit's worth of CPU), time spent asleep counts (a
deadlock, an ``Event`` nobody sets: wall time as before), and time during which some thread of it waited for
a CPU does not. The charge never runs ahead of wall time, so no loader fails sooner than under a wall limit.
Measured, and why not psutil's ``status()``: docs/supervision.md, "A busy machine is not a hang".

A process that starts and ends between two readings (a DataLoader worker of a short epoch) is never found
by them: its process's threads report their last reading as they exit (`_report_exit`), through a pipe the
clocks of the process that forked them read.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing import util

import psutil

__all__ = ["Clock", "RunLimit", "charge_at", "counted_on", "measures", "share_with"]

#: Seconds between two looks for the loader's new processes (a look walks the machine's process table, ~10 ms
#: with 130 processes); a process first seen later is charged from its start, so nothing is lost between looks.
FIND_EVERY = 1.0

#: The processes whose clock this process's example limit reads, besides its own descendants (None: its own
#: tree only). A rank sets the other ranks' processes (`share_with`): one rank asleep in a collective while
#: another is starved is waiting on the starved one.
_SHARED: Callable[[], Iterable[int]] | None = None


def share_with(pids: Callable[[], Iterable[int]] | None) -> None:
    """Charge this process's example limit to the processes ``pids()`` names too (and their descendants)."""
    global _SHARED
    _SHARED = pids


#: One thread's reading: on-CPU ns, run-queue ns (both as the kernel last accounted them), whether it is
#: runnable now (state R: running, or waiting for a CPU), and when it started (seconds since boot).
Reading = tuple[int, int, bool, float]
#: Clock ticks per second, the unit of a thread's start time in ``/proc/PID/task/TID/stat``.
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(pid: int) -> dict[int, Reading] | None:
    """Each of ``pid``'s threads' `Reading`, by thread id, or None (gone, or no schedstat: not Linux, or a
    kernel without ``CONFIG_SCHED_INFO``)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found: dict[int, Reading] = {}
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read().rpartition(b")")[2].split()
            found[int(tid)] = (int(fields[0]), int(fields[1]), stat[0] == b"R", int(stat[19]) / _TICKS)
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended between the listing and the read
    return found or None


#: This process's pipe for its children's last readings (read end, write end), and the pid that made it: a
#: child forked from this process inherits the variable, and makes its own for its own children.
_exit_pipe: tuple[int, int, int] | None = None
#: The last readings the children reported (pid, its threads), the newest last, and how many were ever
#: reported: a clock reads those reported since its last sample, up to the most recent `KEEP_EXITS`.
KEEP_EXITS = 4096
_exits: deque[tuple[int, dict[int, Reading]]] = deque(maxlen=KEEP_EXITS)
_exits_reported = 0
#: A line a child writes as it exits: pid, then per thread its tid, ns on a CPU, ns waiting, start (s).
_FIELDS = 4


def _report_exit(pipe: int) -> None:
    """In a process forked by the multiprocessing machinery from one whose clocks read ``pipe``, as it exits:
    its threads' last readings, one write (atomic below ``PIPE_BUF``; dropped if the pipe is full, not waited
    on: an exiting worker must not block)."""
    if (threads := _read(os.getpid())) is None:
        return
    line = " ".join([str(os.getpid()), *(f"{tid} {r} {w} {born!r}" for tid, (r, w, _, born) in threads.items())])
    with contextlib.suppress(OSError):
        os.write(pipe, f"{line}\n".encode("ascii"))


def _at_fork(_: object) -> None:
    # multiprocessing's own after-fork hook, in the child: its registry of exit finalizers was just cleared.
    if _exit_pipe is not None:  # the parent's pipe (this child makes its own if a clock here measures it)
        util.Finalize(None, _report_exit, args=(_exit_pipe[1],), exitpriority=-1_000_000)  # after the worker's


def _hear_exits() -> None:
    """Have this process's multiprocessing children (DataLoader workers, theirs too) report as they exit."""
    global _exit_pipe
    if _exit_pipe is not None and _exit_pipe[2] == os.getpid():
        return
    with contextlib.suppress(OSError):
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        fresh = _exit_pipe is None  # else the hook was registered by an ancestor, and forked with the rest
        _exit_pipe = (r, w, os.getpid())
        if fresh:
            util.register_after_fork(_at_fork, _at_fork)


def _drain() -> None:
    """Move what the children reported since into `_exits`."""
    global _exits_reported
    if _exit_pipe is None or _exit_pipe[2] != os.getpid():
        return
    data = b""
    with contextlib.suppress(OSError):  # BlockingIOError: nothing more
        while chunk := os.read(_exit_pipe[0], 1 << 16):
            data += chunk
    for line in data.decode("ascii", "replace").splitlines():
        with contextlib.suppress(ValueError, IndexError):
            pid, *fields = line.split()
            threads = {int(fields[i]): (int(fields[i + 1]), int(fields[i + 2]), False, float(fields[i + 3]))
                       for i in range(0, len(fields), _FIELDS)}
            _exits.append((int(pid), threads))
            _exits_reported += 1


def measures() -> bool:
    """Whether this system says how long a process waited to run (else the limit is wall time, as before)."""
    return _read(os.getpid()) is not None


class Clock:
    """Seconds charged (`charged`) to the processes ``roots()`` names and their descendants, since it was made,
    read at each `sample`. Making one reads the roots only (about 0.1 ms: one per example); descendants are
    found at the samples, and one born since is charged from its start. Without schedstat it is wall time.

    A clock that measures its own process does not charge it the CPU its samples take (walking the process
    table, reading ``/proc``): starved, a process sampled at every alarm would otherwise be charged its own
    clock (measured: 0.98 s of CPU in 460 s of wall time for an example whose loader needed 0.12 s).

    The kernel accounts a wait in the run queue when it ends (the thread is given a CPU): a thread still
    waiting at a sample has waited, since the last one, whatever it did not spend running or in accounted
    waits. That much is credited as waiting now, and taken off the accounted wait when the kernel reports it.
    """

    def __init__(self, roots: Callable[[], Iterable[int]]) -> None:
        spent = time.thread_time_ns()
        self._roots = roots
        self._pids: set[int] = set()
        self._found_at = -FIND_EVERY
        #: How many children's exits were reported before this clock was made (not its to charge).
        self._exits_read = _exits_reported
        self._since = time.time()
        self._since_boot = _uptime()
        self._known: set[int] = set()
        self._last: dict[int, Reading] = {}
        #: Per thread: the wait credited at a sample that the kernel has not accounted yet.
        self._credit: dict[int, int] = {}
        me = os.getpid()
        for pid in sorted(set(roots()), key=lambda pid: pid == me):  # as in `sample`: the first interval too
            self._last.update(_read(pid) or {})
            self._known.add(pid)
        self._at = time.monotonic()
        self.charged = 0.0
        #: This process is among those measured: the CPU its samples take is not charged (ns not yet taken off).
        self._measures_itself = os.getpid() in self._known
        if self._measures_itself:  # its children, forked from now on, report their last readings
            _hear_exits()
            _drain()
            self._exits_read = _exits_reported
        self._overhead = time.thread_time_ns() - spent

    def _find(self, now: float) -> set[int]:
        if now - self._found_at >= FIND_EVERY:
            self._found_at = now
            found: set[int] = set()
            for root in self._roots():
                with contextlib.suppress(psutil.Error):
                    found.update(c.pid for c in psutil.Process(root).children(recursive=True))
                    found.add(root)
            self._pids = found
        return self._pids

    def _born_since(self, pid: int) -> bool:
        try:
            return psutil.Process(pid).create_time() >= self._since - 0.02
        except psutil.Error:
            return False

    def _exited(self, alive: dict[int, Reading], gone: set[int]) -> dict[int, Reading]:
        """The last readings of this process's children that ended since the last sample (reported as they
        exited), of threads not read alive now; a child born before this clock was made and never read is not
        its to charge."""
        _drain()
        new, self._exits_read = min(_exits_reported - self._exits_read, len(_exits)), _exits_reported
        found: dict[int, Reading] = {}
        for pid, threads in list(_exits)[len(_exits) - new:]:
            if pid not in gone and min(born for _, _, _, born in threads.values()) < self._since_boot - 0.02:
                continue
            found.update({tid: reading for tid, reading in threads.items() if tid not in alive})
        return found

    def sample(self) -> float:
        """Charge the time since the last sample; the seconds charged so far."""
        spent = time.thread_time_ns()
        readings: dict[int, Reading] = {}
        me = os.getpid()
        gone: set[int] = set()
        # An interval ends (and the next begins) when the readings were taken, not when the sample began:
        # starved, this process may wait seconds for a CPU while it walks the process table (or before its
        # first reading), and those seconds are in its reading. With the end taken first they were charged as
        # sleep in the next interval and lost to this one's cap on waits (measured: 3 s of a 3 s limit in 12 s
        # of wall time, where 0.07 s was right). So this process is read last, and the end taken right after.
        for pid in sorted(self._find(time.monotonic()) | self._known, key=lambda pid: pid == me):
            threads = _read(pid)
            if threads is None:
                if pid in self._known:
                    gone.add(pid)
                self._known.discard(pid)
                continue
            if pid not in self._known:  # what a process did before this clock began is no example's of it
                self._known.add(pid)
                if not self._born_since(pid):
                    self._last.update(threads)
            readings.update(threads)
        if self._measures_itself:
            readings.update(self._exited(readings, gone))
        now = time.monotonic()
        dt, self._at = max(0.0, now - self._at), now
        if not readings:  # nothing to read (no schedstat, or every process gone): wall time
            self.charged += dt
            return self.charged
        read = time.thread_time_ns()
        ran = waited = 0
        span, uptime = int(dt * 1e9), _uptime()
        sampler = threading.get_native_id()  # running this very sample (state R): it did not wait
        for tid, (r, w, runnable, born) in readings.items():
            runnable = runnable and tid != sampler
            r0, w0, _, _ = self._last.get(tid, (0, 0, False, 0.0))  # a thread first seen now: since its start
            d_ran, d_wait = max(0, r - r0), max(0, w - w0)
            credit = self._credit.pop(tid, 0)
            paid = min(credit, d_wait)
            d_wait, credit = d_wait - paid, credit - paid
            lived = span if tid in self._last else min(span, int(max(0.0, uptime - born) * 1e9))
            if runnable and (pending := lived - d_ran - d_wait) > 0:
                d_wait, credit = d_wait + pending, credit + pending
            if credit:
                self._credit[tid] = credit
            ran, waited = ran + d_ran, waited + d_wait
        self._last = readings
        if self._measures_itself:  # this sample's reading and what earlier ones took after theirs
            ran = max(0, ran - self._overhead - (read - spent))
        self.charged += max(min(dt, ran / 1e9), dt - min(dt, waited / 1e9))
        self._overhead = time.thread_time_ns() - read if self._measures_itself else 0
        return self.charged


@dataclass
class RunLimit:
    """Charged seconds several commands may take together (a multi-rank run's ``run_timeout``): each
    `supervised.watch` given it adds what its clock charged, so a run starved of CPU is not ended for the time its processes
    waited for one (at a load of 20 to 25 a correct 2-rank run passed a 135 s wall-clock limit), while a rank
    asleep forever is charged every second and a spinning one its CPU. It never passes sooner than the same
    limit in wall time would. The time between commands (the checker's own work) is not the ranks' to pay."""

    seconds: float
    #: Seconds charged by the commands watched so far.
    charged: float = 0.0
    began: float = field(default_factory=time.monotonic)

    def passed(self, charged: float, now: float) -> bool:
        """Whether the limit passed, with ``charged`` seconds of the command being watched."""
        return self.charged + charged > self.seconds and now > self.began + self.seconds


def charge_at(read: list[tuple[float, float]], when: float, before: float) -> float:
    """What a clock had charged at ``when``, between two of its readings ``read`` (when taken, the charge
    then); ``before`` for a moment before the first. Not the wall time since: a watcher starved of a CPU
    looks late, and counting the whole wait from the example's start to that look could pass a short
    timeout's grace for a loader charged nothing."""
    if when < read[0][0]:
        return before
    (t0, c0), (t1, c1) = next((a, b) for a, b in itertools.pairwise(read) if a[0] <= when < b[0])
    return c0 + (c1 - c0) * (when - t0) / max(t1 - t0, 1e-9)


def counted_on(charged: float, mark: float, alarms: Iterable[tuple[float, float, float]],
               read: list[tuple[float, float]]) -> float:
    """What a watch's clock, ``charged`` by now and ``mark`` when an example began, says the example was charged;
    or, if less, what an example alarm's own reading of the same processes' clock says, counted on by the watch's
    since: ``alarms`` (the watch's mark when that alarm's example began, when it read, what it read). A charge is
    not additive over intervals (each takes the threads' run-queue waits off, summed, up to its length): read
    every half second, a starved group is charged more than read once at the limit, and the watch called a
    starved rank hung before its own alarm (docs/supervision.md, "A busy machine is not a hang")."""
    spent = charged - mark
    for began, at, theirs in alarms:
        since = charged - charge_at(read, at, mark) if at < read[-1][0] else 0.0
        spent = min(spent, theirs + began - mark + since)
    return spent


def _uptime() -> float:
    """Seconds since boot, as thread start times count them."""
    try:
        with open("/proc/uptime", "rb") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def own_group() -> Callable[[], Iterable[int]]:
    """The processes this process's example limit is charged to: itself, and those `share_with` named."""
    me, shared = os.getpid(), _SHARED
    if shared is None:
        return lambda: (me,)
    return lambda: {me, *shared()}
