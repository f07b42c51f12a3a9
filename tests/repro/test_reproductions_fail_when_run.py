"""Every printed reproduction fails when pasted, and passes with the broken loader swapped for a correct one.

The charter: a failure message ends with a reproduction of a few lines that shows the failure. A reproduction that
ends in a comment saying what must hold fails nothing (SC31's did until session 39, SC23's for a loader whose order
depends on num_workers, SC41's; SC10's fresh-process half left its first process in comments). Here each zoo kill's
reproduction (`zoo_kills.killed`: the search test_clauses already ran) runs on its own, in a clean namespace and a
directory of its own, and must raise: an AssertionError of the scenario language, or the loader's own error
(`LoaderError`) for a clause that fails on a crash. The rank loaders' reproductions (SC31) are run in
tests/clauses/test_world_change.py and test_endless_world_change.py, beside the check that prints them; SC32's
(every rank replayed in one process) here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import zoo
import zoo_kills
from ranked_loaders import target
from reproductions import RAN_CLEAN, run_all, run_here
from world_checks import on_two_ranks

from stateful_contract import LoaderConfig

#: What a reproduction may raise where it fails: an assertion, or the loader's own error.
FAILS = ("AssertionError", "LoaderError")
#: SC17's failure is the state's round trip itself: torch.load(weights_only=True) refuses a custom class.
ROUND_TRIP_FAILS = ("UnpicklingError",)

#: A correct loader for each broken one whose reproduction is meaningful on it (default `EpochLoader`).
CORRECT: dict[type, type] = {
    zoo.EndOfEpochStateIgnoresSetEpoch: zoo.SetEpochLoader,  # SC21 loops set_epoch: a loader that has one
    zoo.EpochLoader: zoo.StrictEpochLoader,  # SC40: the strict tier's bad states refused
    zoo.EndlessWindowLosesBuffer: zoo.CyclingLoader,  # an endless stream
    zoo.SkipsTheOffsetInTheNewOrder: zoo.WorkerOrderedEpochs,  # an order that depends on num_workers, resumed right
    zoo.RefusesWorkerChangeBare: zoo.RefusesWorkerChangeByName,  # SC41: the refusal names both counts
}
#: Broken loaders that are random by design, whose reproduction fails by chance, and how often it runs clean: each is
#: run until it fails, at most `TRIES` times (a run clean that often is a reproduction that shows nothing).
BY_CHANCE: dict[type, str] = {
    # A 2-sample epoch in a fresh random order agrees with another loader's 1 time in 2; three epochs, 1 in 8 (the
    # session 39 acceptance run that met it once said "ran clean").
    zoo.UnseededShuffle: "two fresh loaders' orders agree by chance: 1 run in 8 at 2 samples and 3 epochs",
}
TRIES = 8  # (1/8) ** 8: once in 16 million runs

#: Broken loaders whose reproduction has no correct counterpart to run clean, and why.
NO_CLEAN_COUNTERPART: dict[type, str] = {
    # Its scenario (a pass cut short at the step limit the loader learnt) is drawn for this loader: on
    # EpochLoader the same lines compare other passes and raise. Found in session 39, not fixed: see the report.
    zoo.EndsThePassAtTheStepLimit: "the cut-short scenario's passes are this loader's",
    zoo.UnseededShuffle: "SC18 compares two fresh loaders: any seeded one runs clean, which shows nothing of it",
}


def _swapped(source: str, loader: type) -> str:
    """``source`` with ``loader`` replaced by its correct counterpart on the factory line."""
    correct = CORRECT.get(loader, zoo.EpochLoader)
    line = re.compile(rf"^from zoo import {loader.__name__}; factory = {loader.__name__}$", re.MULTILINE)
    swapped = line.sub(f"from zoo import {correct.__name__} as factory", source)
    assert swapped != source, f"no factory line for {loader.__name__} in:\n{source}"
    return swapped


def _allowed(loader: type) -> tuple[str, ...]:
    return FAILS + (ROUND_TRIP_FAILS if zoo.KILLS[loader] == "SC17" else ())


@zoo_kills.group(zoo.SkipsTheOffsetInTheNewOrder)
def test_sc23_s_reproduction_asserts_the_samples_of_the_rest_of_the_epoch(tmp_path_factory: pytest.TempPathFactory,
                                                                        tmp_path: Path) -> None:
    """A loader whose order depends on num_workers, resumed with another count: the reproduction ends in the
    assertion the clause makes (it ended in a comment), raises, and passes the loader that resumes right."""
    report = zoo_kills.killed(tmp_path_factory, zoo.SkipsTheOffsetInTheNewOrder)  # test_clauses' search
    source = report["SC23"].reproduction
    assert source.splitlines()[-1].startswith("assert_same_samples("), source
    assert run_here(source, tmp_path / "broken") == "AssertionError", source
    assert run_here(_swapped(source, zoo.SkipsTheOffsetInTheNewOrder), tmp_path / "correct") == RAN_CLEAN


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")
def test_sc32_s_reproduction_replays_every_rank_and_asserts_they_stay_in_step(tmp_path: Path) -> None:
    """7 samples on 2 ranks, 4 batches to rank 0 and 3 to rank 1: the reproduction (it ended in a comment) replays
    both ranks in one process and ends in the assertion the clause makes; it raises, and passes a loader that
    deals every rank as many batches (global_batches cuts the epoch to a multiple of the world size)."""
    _, sc32 = on_two_ranks(target("uneven_shards"), "SC32", LoaderConfig(dataset_size=7, batch_size=1))
    assert sc32.status == "failed", sc32.message
    source = sc32.reproduction
    assert "assert_ranks_in_step(ranks, resumed" in source and "# Every rank must" not in source, source
    assert run_here(source, tmp_path / "broken") == "AssertionError", source
    correct = source.replace("['uneven_shards']", "['global_batches']")
    assert correct != source, source
    assert run_here(correct, tmp_path / "correct") == RAN_CLEAN, correct


@pytest.mark.acceptance
def test_every_zoo_kill_s_reproduction_fails_when_run_and_passes_a_correct_loader(
        tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """All of them in one fresh interpreter per string hash seed (SC10's fresh-process half asks for one)."""
    broken = {loader: zoo_kills.killed(tmp_path_factory, loader)[cid] for loader, cid in zoo.KILLS.items()}
    for loader, result in broken.items():
        assert result.status == "failed" and result.reproduction, (loader.__name__, result.status, result.message)
    sources = {loader.__name__: result.reproduction for loader, result in broken.items() if loader not in BY_CHANCE}
    sources |= {f"{loader.__name__}-correct": _swapped(result.reproduction, loader)
                for loader, result in broken.items() if loader not in NO_CLEAN_COUNTERPART}
    verdicts = run_all(sources, tmp_path)
    wrong = {name: got for loader in broken if loader not in BY_CHANCE
             and (got := verdicts[name := loader.__name__]).split(":")[0] not in _allowed(loader)}
    wrong |= {name: got for name, got in verdicts.items() if name.endswith("-correct") and got != RAN_CLEAN}
    for loader in BY_CHANCE:
        tries = [run_here(broken[loader].reproduction, tmp_path / f"{loader.__name__}-{n}") for n in range(TRIES)]
        if not any(got.split(":")[0] in _allowed(loader) for got in tries):
            wrong[loader.__name__] = f"{TRIES} runs: {sorted(set(tries))}"
    shown = sources | {loader.__name__: broken[loader].reproduction for loader in BY_CHANCE}
    assert not wrong, "\n\n".join(f"{name}: {got}\n{shown[name]}" for name, got in wrong.items())
