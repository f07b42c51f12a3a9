"""The per-example alarm keeps an outer ITIMER_REAL timer (pytest-timeout's signal method) working."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from stateful_contract._engine.guard import LoaderHung, can_interrupt, deadline

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
