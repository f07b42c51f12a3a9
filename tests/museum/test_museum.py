"""The museum's verdicts stay current.

- A piece whose should-catch clause exists and that the ci profile catches must fail
  `check()` with that clause ID.
- A piece that needs a clause CONTRACT.md v2 specifies but the package does not
  implement yet (SC19-SC23), or that the ci profile misses (`CI_MISSES`), is a
  strict expected failure: the day the clause lands and catches it, the xfail turns
  into an error, and the piece moves to the first group. That is intended.
- Every piece the contract misses really has its bug: a hand-written version of its
  usage pattern (`triggers.py`) shows it, and shows nothing on the correct bases.
- The bases are correct, and the torchdata-pattern baseline passes a correct loader.
"""

from __future__ import annotations

import pytest

from stateful_contract import LoaderConfig, check

from . import BY_ID, CI_MISSES, MUSEUM, implemented_clauses
from ._base import ContinuingLoader, ShardedEpochLoader, WorkerPoolLoader
from .baseline import baseline_configs, run_baseline
from .triggers import TRIGGERS

IMPLEMENTED = implemented_clauses()
#: Configurations the triggers are played on: 12 samples in batches of 2, shuffled or
#: not, in-process or with 2 (simulated) workers.
TRIGGER_CONFIGS = [LoaderConfig(dataset_size=12, batch_size=2, shuffle=s, num_workers=w, seed=3)
                   for s in (False, True) for w in (0, 2)]


def _caught_today(piece) -> bool:  # type: ignore[no-untyped-def]
    return piece.should_catch in IMPLEMENTED and piece.id not in CI_MISSES


def _params(pieces):  # type: ignore[no-untyped-def]
    out = []
    for p in pieces:
        marks = []
        if p.should_catch not in IMPLEMENTED:  # check() refuses the unknown clause ID with a KeyError
            marks.append(pytest.mark.xfail(strict=True, raises=(KeyError, AssertionError),
                                           reason=f"needs {p.should_catch} (CONTRACT v2), not implemented yet"))
        elif p.id in CI_MISSES:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=CI_MISSES[p.id]))
        out.append(pytest.param(p, id=p.id, marks=marks))
    return out


# Evidence, like the compatibility rows: 30 whole checks (about 100 s of CPU, a tenth of the README's suite), so
# `nox -s acceptance` runs them; the README's suite keeps a broken loader per clause (tests/clauses/test_clauses.py,
# the zoo's kills) and the museum's triggers and bases below.
@pytest.mark.acceptance
@pytest.mark.parametrize("piece", _params(MUSEUM))
def test_the_contract_kills_the_piece_with_its_clause(piece):  # type: ignore[no-untyped-def]
    report = check(piece.check_target, clauses=[piece.should_catch], **piece.check_kwargs)
    result = report[piece.should_catch]
    assert result.status == "failed", (result.status, result.message)
    assert result.message.startswith(piece.should_catch), result.message


def test_the_epoch_pieces_are_caught_naming_the_lost_epoch():
    """verl#7401 (set_epoch loop, SC21) and torchdata#1437 (no set_epoch: SC10's epoch alignment)."""
    verl = check(BY_ID["verl-7401"].factory, clauses=["SC21"])["SC21"]
    assert verl.status == "failed" and "after the last batch" in verl.context and "is lost" in verl.got
    torchdata = check(BY_ID["torchdata-1437"].factory, clauses=["SC10", "SC21"])
    assert torchdata["SC10"].status == "failed" and torchdata["SC10"].got.startswith("epoch lost")
    assert torchdata["SC21"].status == "not-judged"  # it has no set_epoch, like StatefulDataLoader


@pytest.mark.parametrize("piece", [p for p in MUSEUM if not _caught_today(p)], ids=lambda p: p.id)
def test_a_piece_the_contract_misses_breaks_under_its_usage_pattern(piece):  # type: ignore[no-untyped-def]
    triggers = TRIGGERS[piece.should_catch]
    found = {t.__name__: [t(piece.factory, c) for c in TRIGGER_CONFIGS] for t in triggers}
    assert any(any(results) for results in found.values()), f"no trigger of {piece.should_catch} shows the bug"


@pytest.mark.acceptance
@pytest.mark.parametrize("base", [ShardedEpochLoader, WorkerPoolLoader, ContinuingLoader], ids=lambda c: c.__name__)
def test_the_bases_are_correct(base):  # type: ignore[no-untyped-def]
    report = check(base)
    assert report.passed, {r.id: r.message for r in report.results if r.is_failure}
    for cid, triggers in TRIGGERS.items():
        for trigger in triggers:
            for config in TRIGGER_CONFIGS:
                assert trigger(base, config) is None, (cid, trigger.__name__, config)


def test_the_baseline_passes_a_correct_loader():
    assert not run_baseline(ShardedEpochLoader).caught
    assert not run_baseline(ShardedEpochLoader, baseline_configs(world_size=2)).caught
    assert not run_baseline(lambda c: c.stateful_dataloader(), [c for c in baseline_configs() if c.num_workers == 0]).caught


def test_the_baseline_catches_what_it_was_written_for():
    """A loader that ignores the loaded state is the bug torchdata's pattern exists for."""

    class IgnoresTheState(ShardedEpochLoader):
        def load_state_dict(self, state_dict):  # type: ignore[no-untyped-def,override]
            pass

    assert run_baseline(IgnoresTheState).caught


def test_every_piece_cites_a_report_and_says_how_it_breaks():
    ids = [p.id for p in MUSEUM]
    assert len(ids) == len(set(ids)) >= 25
    for p in MUSEUM:
        owner_repo, _, number = p.report.partition("#")
        assert owner_repo.count("/") == 1 and number.isdigit(), p.report
        assert p.title and p.trigger, p.id
        assert p.mechanism.endswith(".") and p.mechanism.count(". ") == 0, (p.id, p.mechanism)
