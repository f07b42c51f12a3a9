"""What the process running the loader is doing, readable after that process died.

A supervised child and every rank keep a *status board*: a small file mapped into their
memory, holding the command being run (clause, config, plan), the call into the loader
in progress (``loader.load_state_dict(state)``), the reproduction recorded so far and the
example timeout currently running. Writing is a memory copy, with no system call, so it
is done before and after every call into the loader; and what was written outlives the
writer (the page belongs to the kernel's page cache), so the supervisor reads it after
a SIGSEGV, an ``os._exit`` or a SIGKILL and says what the loader was doing, with the
example's reproduction up to the line that never returned.

The steps report through `calling`, `stateful_contract._engine.guard.deadline` through
`deadline_started`, and a recorded `Program` through `watch`; all three do nothing in a
process that installed no board (in-process checks).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["Board", "BoardView", "calling", "command", "deadline_ended", "deadline_started", "install", "read",
           "watch"]

_MAGIC = b"SCBOARD1"
_SIZE = 64 * 1024
#: Layout: magic, then the running deadline (monotonic start, seconds; 0 s: none), the
#: writer's pid, the loader call (active flag, length, text), the command (length, text), the program.
_DEADLINE = 8
_PID = 24
_CALL, _CALL_TEXT = 32, 256
_COMMAND, _COMMAND_TEXT = 296, 4096 - 296 - 4
_PROGRAM = 4096
_PROGRAM_TEXT = _SIZE - _PROGRAM - 4


def _clip(text: str, size: int) -> bytes:
    data = text.encode("utf-8", "replace")
    if len(data) <= size:
        return data
    marker = b"\n# ... (cut: too long for the status board)"
    return data[: size - len(marker)] + marker


class Board:
    """The writing side, in the process where the loader lives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, _SIZE)
            self._mm = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._mm[0:8] = _MAGIC
        struct.pack_into("<q", self._mm, _PID, os.getpid())
        self._call_label = b""

    def command(self, text: str) -> None:
        """What the process was asked to do (a clause's example, the uninterrupted run...)."""
        data = _clip(text, _COMMAND_TEXT)
        struct.pack_into("<I", self._mm, _COMMAND, len(data))
        self._mm[_COMMAND + 4 : _COMMAND + 4 + len(data)] = data
        self.call_label("", active=False)
        self.program("")

    def call_label(self, label: str, *, active: bool) -> None:
        data = _clip(label, _CALL_TEXT)
        self._mm[_CALL + 3 : _CALL + 3 + len(data)] = data
        struct.pack_into("<BH", self._mm, _CALL, int(active), len(data))

    def enter(self, label: str) -> None:
        data = label.encode()
        if data != self._call_label:
            self._call_label = data
            self.call_label(label, active=True)
        else:
            self._mm[_CALL] = 1

    def leave(self) -> None:
        self._mm[_CALL] = 0

    def program(self, source: str) -> None:
        data = _clip(source, _PROGRAM_TEXT)
        self._mm[_PROGRAM + 4 : _PROGRAM + 4 + len(data)] = data
        struct.pack_into("<I", self._mm, _PROGRAM, len(data))

    def deadline(self, started: float, seconds: float) -> None:
        struct.pack_into("<dd", self._mm, _DEADLINE, started, seconds)

    def close(self) -> None:
        self._mm.close()


@dataclass(frozen=True)
class BoardView:
    """What a board said when it was read."""

    command: str = ""
    call: str = ""
    in_call: bool = False
    program: str = ""
    #: The example timeout running (``time.monotonic()`` start, seconds), if any.
    deadline: tuple[float, float] | None = None
    #: The process that wrote the board (0: none yet).
    pid: int = 0

    @property
    def during(self) -> str:
        """Where the loader was: ``during loader.load_state_dict(state)``, ``after next(...) returned``."""
        if not self.call:
            return "before the first call into the loader"
        return f"during {self.call}" if self.in_call else f"after {self.call} returned"


def read(path: Path) -> BoardView:
    """The board at ``path`` (empty when it was never written)."""
    try:
        data = path.read_bytes()
    except OSError:
        return BoardView()
    if len(data) < _SIZE or data[:8] != _MAGIC:
        return BoardView()
    started, seconds = struct.unpack_from("<dd", data, _DEADLINE)
    (pid,) = struct.unpack_from("<q", data, _PID)
    active, call_len = struct.unpack_from("<BH", data, _CALL)
    (command_len,) = struct.unpack_from("<I", data, _COMMAND)
    (program_len,) = struct.unpack_from("<I", data, _PROGRAM)

    def text(offset: int, length: int, size: int) -> str:
        return data[offset : offset + min(length, size)].decode("utf-8", "replace")

    return BoardView(command=text(_COMMAND + 4, command_len, _COMMAND_TEXT),
                     call=text(_CALL + 3, call_len, _CALL_TEXT), in_call=bool(active),
                     program=text(_PROGRAM + 4, program_len, _PROGRAM_TEXT),
                     deadline=(started, seconds) if seconds > 0 else None, pid=pid)


_BOARD: Board | None = None


def install(board: Board | None) -> None:
    """Make ``board`` this process's status board (None: none)."""
    global _BOARD
    _BOARD = board


class _Calling:
    __slots__ = ("board", "label")

    def __init__(self, board: Board, label: str) -> None:
        self.board = board
        self.label = label

    def __enter__(self) -> None:
        self.board.enter(self.label)

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.board.leave()


class _Nothing:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


_NOTHING = _Nothing()


def calling(label: str) -> _Calling | _Nothing:
    """Around one call into the loader: the board says which while it runs."""
    board = _BOARD
    return _NOTHING if board is None else _Calling(board, label)


def deadline_started(started: float, seconds: float) -> None:
    if _BOARD is not None:
        _BOARD.deadline(started, seconds)


def deadline_ended() -> None:
    if _BOARD is not None:
        _BOARD.deadline(0.0, 0.0)


def command(text: str) -> None:
    if _BOARD is not None:
        _BOARD.command(text)


def watch(program: Any, config_code: str) -> None:
    """Show ``program`` (a `stateful_contract._engine.recording.Program`) on the board as it grows."""
    board = _BOARD
    if board is None:
        return

    def show(p: Any) -> None:
        board.program(p.source(config_code))

    program.listener = show
    show(program)
