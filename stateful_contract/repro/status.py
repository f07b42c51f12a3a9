"""What the process running the loader is doing, readable after that process died: its status log.

What it records, and why one ``write`` per event survives a SIGSEGV or a SIGKILL of the writer:
docs/supervision.md, "The reproduction reaches the parent". A process that installed no log writes nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Board", "BoardView", "calling", "charged", "command", "deadline", "install", "note", "read", "watch", "writer"]

_LEAVE = b'{"in_call": false}\n'


class Board:
    """The writing side, in the process where the loader lives."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        self._enter = b""
        self._label = self._label_next = self._program = ""
        # The first line tells this log from an earlier one at the same path (a reader's cache), and where
        # the process runs (a rank's pid means something on its host only).
        self._write({"pid": os.getpid(), "host": socket.gethostname(), "opened": time.time_ns()})

    def _write(self, event: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(event) + "\n").encode())

    def command(self, text: str) -> None:  # what the process was asked to do (an example, a run...)
        self._program = ""
        self._write({"command": text})

    def note(self, text: str) -> None:
        """What the process does now, within its command (a rank joining its group, saving with DCP)."""
        self._write({"note": text})

    def enter(self, label: str) -> None:
        if label != self._label:
            self._label, self._enter = label, (json.dumps({"call": label}) + "\n").encode()
        os.write(self._fd, self._enter)

    def leave(self) -> None:
        os.write(self._fd, _LEAVE)

    def __call__(self, label: str) -> Board:
        """The board as the context of the call ``label`` (`calling`): entered at once, so calls may nest."""
        self._label_next = label
        return self

    def __enter__(self) -> None:
        self.enter(self._label_next)

    def __exit__(self, *exc: object) -> None:
        self.leave()

    def program(self, source: str) -> None:
        if source.startswith(self._program):  # a step added lines: only they are written
            self._write({"more": source[len(self._program):]})
        else:
            self._write({"program": source})
        self._program = source

    def deadline(self, started: float, seconds: float, patience: float = 0.0) -> None:
        self._write({"deadline": [started, seconds, patience] if seconds > 0 else None})

    def charged(self, at: float, seconds: float) -> None:
        self._write({"charged": [at, seconds]})

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class BoardView:
    """What a log said when it was read."""

    #: What the process was last said to be doing: its command, or a note within it (`Board.note`).
    command: str = ""
    call: str = ""
    in_call: bool = False
    program: str = ""
    #: The example timeout running (``time.monotonic()`` start, seconds), if any.
    deadline: tuple[float, float] | None = None
    #: Charged seconds past it that the example's alarm gave a call it found running (`guard.patience`).
    patience: float = 0.0
    #: The example alarm's last reading of its clock (``time.monotonic()`` when read, seconds charged), if any.
    charged: tuple[float, float] | None = None
    #: The process that wrote the log (0: none yet), and its host.
    pid: int = 0
    host: str = ""

    @property
    def during(self) -> str:
        """Where the loader was: ``during loader.load_state_dict(state)``, ``after next(...) returned``."""
        if not self.call:
            return "before the first call into the loader"
        return f"during {self.call}" if self.in_call else f"after {self.call} returned"


#: Per log: its first line, how far it was read, and what it said by then.
_READ: dict[Path, tuple[bytes, int, dict[str, Any]]] = {}


def read(path: Path) -> BoardView:
    """The log at ``path`` (empty when it was never written), read on from where the last look ended."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
            seen, offset, state = _READ.pop(path, (b"", 0, {}))
            if first != seen or not first.endswith(b"\n"):
                offset, state = 0, {}
            f.seek(offset)
            data = f.read()
    except OSError:
        return BoardView()
    end = data.rfind(b"\n") + 1  # a line still being written is read at the next look
    for line in data[:end].splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if "command" in event:
            state = {"command": event["command"]}
        elif "note" in event:
            state["command"] = event["note"]
        elif "call" in event:
            state.update(call=event["call"], in_call=True)
        elif "more" in event:
            state["program"] = state.get("program", "") + event["more"]
        else:
            state.update(event)
    _READ[path] = (first, offset + end, state)
    if len(_READ) > 64:  # the logs of children long gone
        del _READ[next(iter(_READ))]
    deadline, opened = state.get("deadline"), json.loads(first) if first.endswith(b"\n") else {}
    return BoardView(command=state.get("command", ""), call=state.get("call", ""),
                     in_call=bool(state.get("in_call")), program=state.get("program", ""),
                     deadline=(deadline[0], deadline[1]) if deadline else None,
                     patience=float(deadline[2]) if deadline else 0.0,
                     charged=(reading[0], reading[1]) if (reading := state.get("charged")) else None,
                     pid=opened.get("pid", 0),
                     host=opened.get("host", ""))


def writer(path: Path) -> tuple[int, str]:
    """The pid and host of the process that opened the log at ``path`` (0, "": none yet): its first line."""
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline())
        return int(first.get("pid", 0)), str(first.get("host", ""))
    except (OSError, ValueError, AttributeError):
        return 0, ""


#: This process's status board (None: none).
_BOARD: Board | None = None
_NOTHING = contextlib.nullcontext()


def install(board: Board | None) -> None:
    global _BOARD
    _BOARD = board


def calling(label: str) -> contextlib.AbstractContextManager[None]:
    """Around one call into the loader: the board says which while it runs."""
    return _NOTHING if _BOARD is None else _BOARD(label)


def deadline(started: float, seconds: float, patience: float = 0.0) -> None:
    """An example timeout of ``seconds`` began at ``started`` (``time.monotonic()``; 0 seconds: it ended), and
    its alarm gave a call it found running ``patience`` charged seconds more."""
    if _BOARD is not None:
        _BOARD.deadline(started, seconds, patience)


def charged(at: float, seconds: float) -> None:
    """The example's alarm read its clock at ``at`` (``time.monotonic()``): ``seconds`` charged so far."""
    if _BOARD is not None:
        _BOARD.charged(at, seconds)


def command(text: str) -> None:
    if _BOARD is not None:
        _BOARD.command(text)


def note(text: str) -> None:
    if _BOARD is not None:
        _BOARD.note(text)


def watch(program: Any, config_code: str) -> None:
    """Show ``program`` (a `recording.Program`) on the board as it grows."""
    if (board := _BOARD) is None:
        return

    def show(p: Any) -> None:
        board.program(p.source(config_code))

    program.listener = show
    show(program)
