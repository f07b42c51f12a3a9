"""A hang that begins late in an example is a hang; a call that is only slow is not (`guard.deadline`).

The alarm tells a hung loader from a slow one by its silence: a hung loader is silent from the call it hangs
in on. A loader that answered batch after batch and then hung for good in the last third of the example was
silent for less than half the example when the limit came, and was called "too slow for this timeout" (not
judged) at any timeout, though it would stall a training run forever. An alarm that finds the loader inside a
call now gives that call the rest of half the limit (charged): returned by then, slow; silent, hung."""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest

from stateful_contract.isolation import supervised
from stateful_contract.repro import guard, status
from stateful_contract.repro.guard import LoaderHung, LoaderSlow, answering, can_interrupt, deadline

pytestmark = pytest.mark.skipif(not can_interrupt(), reason="SIGALRM timers: POSIX main thread only")


class WallClock:
    """A `progress.Clock` that charges wall time: the loader's processes never wait for a CPU (a hang, or a
    watch's own reading)."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.charged = 0.0

    def sample(self) -> float:
        self.charged = time.monotonic() - self.began
        return self.charged


def call(seconds: float) -> None:
    """One call into a loader that takes ``seconds``."""
    with answering():
        time.sleep(seconds)


def test_a_loader_that_answers_then_hangs_in_the_last_third_is_hung_not_slow() -> None:
    started = time.monotonic()
    with pytest.raises(LoaderHung) as hung, deadline(1.0):
        while time.monotonic() - started < 0.8:  # answers 40 times, then hangs 0.2 s before the limit
            call(0.02)
        call(3600)
    assert not isinstance(hung.value, LoaderSlow)
    # The limit, then the call's patience (0.3 s here): on a busy machine later in wall time, never for ever.
    assert time.monotonic() - started < 10


def test_a_call_running_at_the_limit_that_returns_within_its_patience_is_slow() -> None:
    with pytest.raises(LoaderSlow), deadline(1.0):
        while True:  # 0.3 s a batch: each call returns well within half the limit
            call(0.3)


def test_between_calls_at_the_limit_the_loader_answers() -> None:
    with pytest.raises(LoaderSlow), deadline(0.5):
        while True:
            call(0.01)
            time.sleep(0.01)  # the checker's own work between calls


def test_a_call_silent_since_early_in_the_example_is_hung_at_the_limit() -> None:
    with pytest.raises(LoaderHung) as hung, deadline(0.6):
        call(0.05)
        call(3600)
    assert not isinstance(hung.value, LoaderSlow)  # no patience: silent for more than half already


def test_the_alarm_tells_the_supervisor_the_patience_it_gave(tmp_path: Path) -> None:
    board = status.Board(tmp_path / "board")
    status.install(board)
    try:
        started = time.monotonic()
        with pytest.raises(LoaderHung), deadline(1.0):
            while time.monotonic() - started < 0.8:
                call(0.02)
            with answering():
                seen = status.read(tmp_path / "board")
                assert seen.deadline is not None and seen.patience == 0.0
                while not seen.patience:  # until the alarm, past the limit (charged), gives the call its patience
                    time.sleep(0.02)
                    seen = status.read(tmp_path / "board")
                time.sleep(3600)
    finally:
        status.install(None)
        board.close()
    assert seen.deadline is not None and seen.deadline[1] == 1.0
    assert guard.MIN_RECHECK <= seen.patience <= 0.5, seen.patience  # the rest of half the limit


@pytest.mark.parametrize("patience", [0.0, 0.8])
def test_the_supervisor_waits_the_patience_the_alarm_gave(patience: float) -> None:
    """`supervised.watch` ends what the alarm cannot after the timeout and its grace, and the patience."""

    sent = time.monotonic()
    board = SimpleNamespace(deadline=(sent, 0.5), patience=patience, charged=None, pid=0, host="")
    stall = supervised._watch(lambda: time.sleep(supervised.POLL) or False, lambda: [board], WallClock(), sent=sent,
                              timeout=0.5, memory_limit=None, command_seconds=None, limit=None, baseline=None)
    assert stall is not None and stall.timeout == 0.5
    allowed = 0.5 + patience + supervised.grace(0.5)
    assert allowed <= stall.waited < allowed + 1.0, stall


def test_patience_is_at_most_half_the_limit() -> None:
    assert guard.patience(10.0, 0.0) == 5.0
    assert guard.patience(10.0, 4.0) == pytest.approx(1.0)
    assert guard.patience(10.0, 7.0) == guard.MIN_RECHECK


def test_a_call_given_patience_that_returns_is_called_slow_as_it_returns_not_later() -> None:
    """Waiting for the patience to run out let a slow rank go on into SC30's DCP save, which the other ranks,
    their own alarms past, had left: it stayed stuck there, where no alarm reaches, and was killed as hung."""
    returned: list[int] = []
    guard.set_on_return(lambda: returned.append(guard._calls))
    try:
        with answering():
            with answering():  # a nested call's return is not the call the alarm waited for
                pass
            assert not returned
        assert returned == [0]
        with answering():  # run once
            pass
        assert returned == [0]
    finally:
        guard.set_on_return(None)


def test_slow_is_raised_from_the_return_of_the_call_given_patience() -> None:
    started = time.monotonic()
    with pytest.raises(LoaderSlow) as slow, deadline(1.0):
        while time.monotonic() - started < 0.7:
            call(0.1)  # answers
        call(0.45)  # from 0.3 s before the limit to 0.15 s after it: well within half the limit
        time.sleep(3600)  # the checker's own work after it: never reached
    assert "answering" in [frame.name for frame in traceback.extract_tb(slow.value.__traceback__)]


def test_the_supervisor_counts_on_from_the_ranks_own_alarm_not_past_it() -> None:
    """Read every half second, the watch's clock charged a starved group of ranks more than a rank's alarm,
    read once at the limit, charged the same processes (a thread's wait is taken off per interval, at most its
    length): the watch called rank 0, stuck in a collective, hung before rank 1's own alarm had ended rank 1's
    hang, and the verdict named the rank that waited. It counts on from the last reading any alarm of the host
    made (`status.charged`)."""

    sent = time.monotonic()
    stuck = SimpleNamespace(deadline=(sent, 0.5), patience=0.0, charged=None, pid=1, host="")
    alarmed = SimpleNamespace(deadline=(sent, 0.5), patience=0.0, charged=None, pid=1, host="")

    def answered() -> bool:
        time.sleep(supervised.POLL)
        if alarmed.charged is None and time.monotonic() > sent + 1.0:
            alarmed.charged = (time.monotonic(), 0.2)  # rank 1's alarm: at 1 s of wall time, charged 0.2 s
        return False

    stall = supervised._watch(answered, lambda: [stuck, alarmed], WallClock(), sent=sent, timeout=0.5,
                              memory_limit=None, command_seconds=None, limit=None, baseline=None)
    assert stall is not None and stall.timeout == 0.5
    # Its own clock would have passed the limit and grace (1.5 s) at 1.5 s; from the alarm's reading, at 2.3 s.
    assert 0.2 + 1.0 + (0.5 + supervised.grace(0.5) - 0.2) <= stall.waited < 4, stall
