"""The per-example alarm keeps an outer ITIMER_REAL timer (pytest-timeout's signal method) working."""

from __future__ import annotations

import gc
import signal
import sys
import time
import types
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest
from zoo import EpochLoader

from stateful_contract import check
from stateful_contract.repro import guard
from stateful_contract.repro.guard import LoaderHung, can_interrupt, deadline
from stateful_contract.run.check import CheckInterrupted

pytestmark = pytest.mark.skipif(not can_interrupt(), reason="SIGALRM timers: POSIX main thread only")


class OuterTimeout(Exception):
    pass


def _outer(signum: int, frame: FrameType | None) -> None:
    raise OuterTimeout


@pytest.fixture
def outer_timer() -> Iterator[None]:
    """An outer handler, as pytest-timeout installs; removed afterwards."""
    previous = signal.signal(signal.SIGALRM, _outer)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_the_outer_timer_keeps_its_remaining_time_and_handler(outer_timer: None) -> None:
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    with deadline(10):
        time.sleep(0.2)
    remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    assert 0.6 < remaining < 0.85
    assert signal.getsignal(signal.SIGALRM) is _outer
    with pytest.raises(OuterTimeout):
        time.sleep(2)


def test_an_outer_timer_due_inside_the_block_runs_its_own_handler(outer_timer: None) -> None:
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    started = time.monotonic()
    with pytest.raises(OuterTimeout), deadline(5):
        time.sleep(3)
    assert time.monotonic() - started < 1.0
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0  # a one-shot timer, spent


def test_the_deadline_still_fires_under_a_later_outer_timer(outer_timer: None) -> None:
    signal.setitimer(signal.ITIMER_REAL, 10.0)
    with pytest.raises(LoaderHung), deadline(0.2):
        time.sleep(3)
    remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    assert 9.0 < remaining < 9.85


def test_without_an_outer_timer_nothing_is_left_armed() -> None:
    with deadline(5):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_nested_deadlines_each_keep_their_own() -> None:
    with pytest.raises(LoaderHung) as hung, deadline(0.3):
        with deadline(5):
            time.sleep(3)
    assert hung.value.seconds == 0.3


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C at Python's default, KeyboardInterrupt (an xdist worker ignores SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _ctrl_c_inside_a_gc_callback() -> None:
    """Ctrl-C lands while CPython runs a gc callback (Hypothesis keeps one): the handler's
    KeyboardInterrupt is "Exception ignored", python/cpython#95959."""

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            signal.raise_signal(signal.SIGINT)  # the handler runs here, inside the callback

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_cpython_swallows_a_ctrl_c_that_lands_in_a_gc_callback(ctrl_c_raises: None) -> None:
    """Why `ctrl_c_kept` exists: without it, this Ctrl-C is lost."""
    _ctrl_c_inside_a_gc_callback()  # no KeyboardInterrupt comes out


def test_a_swallowed_ctrl_c_is_raised_again_at_the_next_wait(ctrl_c_raises: None) -> None:
    with guard.ctrl_c_kept():
        _ctrl_c_inside_a_gc_callback()
        with pytest.raises(KeyboardInterrupt):
            guard.raise_lost_ctrl_c()
        guard.raise_lost_ctrl_c()  # raised once


class _CtrlCInCollection(EpochLoader):
    """A loader whose third batch sees a Ctrl-C land inside a gc callback."""

    def __iter__(self) -> Iterator[Any]:
        for i, batch in enumerate(super().__iter__()):
            if i == 2:
                _ctrl_c_inside_a_gc_callback()
            yield batch


def test_a_check_stops_on_a_ctrl_c_that_cpython_swallowed(ctrl_c_raises: None) -> None:
    """Found by the 2-rank Ctrl-C test: a Ctrl-C inside Hypothesis' gc callback was lost and the check judged on."""
    with pytest.raises(CheckInterrupted) as stopped:
        check(_CtrlCInCollection, isolation="in-process", clauses="SC18", profile="dev")
    assert stopped.value.report.interrupted


def test_what_a_step_imports_on_first_use_is_frozen_at_the_next_collection() -> None:
    """DCP, imported by SC19's first save, is 80,000 objects: left unfrozen, every later
    collection before a worker loader would walk them (~55 ms instead of ~7)."""
    name = "stateful_contract_test_imported_on_first_use"
    with guard.frozen():
        frozen_before = gc.get_freeze_count()
        module = types.ModuleType(name)
        module.objects = [[] for _ in range(10_000)]  # type: ignore[attr-defined]
        sys.modules[name] = module
        try:
            guard.collect()
            assert gc.get_freeze_count() >= frozen_before + 10_000
        finally:
            del sys.modules[name]
    assert gc.get_freeze_count() == 0
