"""One result per test session, whichever pytest-xdist worker asks for it first.

A session- or module-scoped fixture runs once per xdist worker: under ``-n 2`` a check
that several tests assert on would run twice. `once` keeps the first worker's result
in the session's shared temporary directory (the parent of each worker's own; xdist
documents this pattern) and hands it to every later caller, on any worker. Each check
such a result comes from starts real processes (ranks, a virtualenv): a run is seconds
of CPU, and these tests only read what it produced.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

__all__ = ["once", "session_dir"]

T = TypeVar("T")


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary directory every worker of this test session sees (the session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], T]) -> T:
    """``compute()``'s result, computed by the first caller of this session under ``name`` and
    unpickled by every other; a caller waits while another computes it. An exception is not
    kept: the next caller computes again, and fails the same way with its own traceback."""
    path = session_dir(tmp_path_factory) / f"once-{name}.pickle"
    with FileLock(f"{path}.lock"):
        if path.exists():
            result: T = pickle.loads(path.read_bytes())
            return result
        value = compute()
        path.write_bytes(pickle.dumps(value))
        return value
