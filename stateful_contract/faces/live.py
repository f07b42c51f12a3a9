"""What a check shows while it runs, the same on every face: on a terminal, a live line; in a log (a CI job, a
pipe), a line per clause as it is judged and, after each minute without one, a line naming what still runs.
A slow check is so told from a hung one (CI systems end a job silent for 10 minutes) without a line per example.

The CLI (``check``, ``demo``, the distributed commands' rank 0) writes these lines to stderr, the report going to
stdout, so ``--json -`` and the other outputs stay whole. The pytest mixin sends them to the log
(`LOGGER`), which pytest shows live with ``--log-cli-level INFO`` and keeps with a failing test's output
otherwise: written between pytest's own, they would break its lines.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from ..report.render import SHOWN, plural, ran

__all__ = ["HEARTBEAT", "LOGGER", "QUIET_HELP", "Live", "shown"]

#: Seconds without a line after which a log is told what is still running.
HEARTBEAT = 60.0

#: The logger the pytest mixin's progress lines go to (INFO).
LOGGER = "stateful_contract.progress"

QUIET_HELP = ("no progress on stderr (on a terminal a live line; in a log a line per clause as it is judged, and one "
              "naming what still runs after each minute without one)")


class Live:
    """The progress callback of `check` (`stateful_contract.run.check.Progress` events), shown on ``stream``: a
    live line if it is a terminal, else the lines a log keeps (one per clause, as the report's table writes
    it: id, name, status, seconds; the heartbeat; a summary once done). ``say``: where those lines go
    instead of ``stream`` (the pytest mixin's log). `stop` (or `finish`) ends the heartbeat's thread; every face
    holds it in a ``with`` block around its check, so that a check that raises (a bug, an error of the user's
    that escapes the engine) stops it too: a heartbeat left running would go on printing "still running" into
    whatever the process does next (the rest of a pytest session, a script that called the CLI)."""

    def __init__(self, stream: TextIO | None = None, *, heartbeat: float = HEARTBEAT,
                 say: Callable[[str], None] | None = None, quiet: bool = False) -> None:
        self.stream = None if quiet else stream
        self.tty = say is None and self.stream is not None and self.stream.isatty()
        self.write_line = (lambda line: None) if quiet else say or self._write
        self.ended: dict[str, str] = {}
        self.started = time.monotonic()  # the summary gives wall time: clauses judged side by side overlap
        #: The clauses running now (several with --jobs): their last event, and when each began.
        self.running: dict[str, tuple[Any, float]] = {}
        self.lock = threading.Lock()  # the heartbeat's thread and the check's write the same lines
        self.said = self.started
        self.heartbeat = heartbeat
        self.stopped = threading.Event()
        if not (self.tty or quiet):
            threading.Thread(target=self._beat, name="stateful-contract-heartbeat", daemon=True).start()

    def __call__(self, event: Any) -> None:
        with self.lock:
            if event.status is None:
                began = self.running.get(event.clause_id, (None, time.monotonic()))[1]
                self.running[event.clause_id] = (event, began)
            else:
                self.running.pop(event.clause_id, None)
                self.ended[event.clause_id] = event.status
            if self.tty and self.stream is not None:  # the line is cleared when the clause ends
                running = f"  running {event.clause_id} {event.name}: example {event.done}/{event.total}"
                self.stream.write("\r\033[K" + (running if event.status is None else ""))
                self.stream.flush()
            elif event.status is not None:
                self._say(f"  {event.clause_id + ' ' + event.name:<45} {SHOWN[event.status]:<10} "
                          f"{event.seconds:6.2f} s")

    def _write(self, line: str) -> None:
        if self.stream is not None:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _say(self, line: str) -> None:
        self.write_line(line)
        self.said = time.monotonic()

    def _beat(self) -> None:
        """After every `HEARTBEAT` seconds without a line: what is still running, and for how long."""
        while not self.stopped.wait(min(self.heartbeat, 5.0)):
            with self.lock:
                now = time.monotonic()
                if now - self.said < self.heartbeat or self.stopped.is_set():
                    continue
                running = [f"{cid} for {now - began:.0f} s" + (f" (example {event.done + 1} of {event.total})"
                                                              if event.total > 1 else "")
                           for cid, (event, began) in self.running.items()]
                self._say(f"  ... still running: {', '.join(running) or 'starting the loader'} "
                          f"({now - self.started:.0f} s since the check began)")

    def __enter__(self) -> Live:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """No more lines: the report follows (or the check ended without one)."""
        with self.lock:
            self.stopped.set()

    def finish(self, report: Any) -> None:
        """The summary line, where no live line was shown (nothing on a terminal). It counts the clauses the
        report's table shows, so it says what the verdict says; the prerequisites a selected clause needed,
        which held and the table leaves out, are named apart (they took part of the time)."""
        self.stop()
        shown = [result for result, _ in ran(report)]
        if self.tty or not shown:
            return
        counts = Counter(SHOWN[result.status] for result in shown)
        held = sum(1 for cid, status in self.ended.items() if status == "passed" and report[cid].status == "skipped")
        self.write_line(f"  checked {plural(len(shown), 'clause')} in {time.monotonic() - self.started:.1f} s: "
                        + ", ".join(f"{n} {said}" for said, n in counts.items())
                        + (f" (after {plural(held, 'prerequisite')}, which held)" if held else ""))


def shown(quiet: bool) -> Live:
    """A command line's progress, on stderr (the report goes to stdout); ``--quiet``: none, and no heartbeat."""
    return Live(sys.stderr, quiet=quiet)
