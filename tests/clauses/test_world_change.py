"""SC31 world-size-change-is-exact-or-refused on real ranks: saved on 2, resumed on 1 and on 3.

The loaders (``tests/ranked_loaders.py``) are written for these tests only. Checks start
real processes (a world change costs a fresh set of processes per new world size), so
the broken loaders are replayed on one example and only the correct ones are searched
(profile ``dev``, in-process configs).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import psutil
import pytest
from ranked_loaders import target
from reproductions import run_here
from world_checks import IN_PROCESS, STATEFUL_DATALOADER_SEARCH, searched

from stateful_contract import LoaderConfig, Progress
from stateful_contract.clauses.world_change import WorldResume, judge_world_change
from stateful_contract.faces.distributed import check_world
from stateful_contract.isolation.processes import processes_of
from stateful_contract.repro import Position
from stateful_contract.repro.advice import advisories
from stateful_contract.repro.outcome import ClauseViolation
from stateful_contract.search.plans import Checkpoint
from tests.stateful_dataloader_matrix import MULTI_RANK

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

#: What a rank process runs (`isolation.ranks.launch.Phase.start`).
RANK_MAIN = "stateful_contract.isolation.ranks.world:rank_main"
MID_EPOCH = (LoaderConfig(dataset_size=8, batch_size=1), Position(epoch=0, batches=2))


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, says", [
    # Ranks 0 and 1 had yielded [0, 2] and [1, 3]; alone, rank 0 skips 2 of the 8 samples.
    ("skips_its_own_count", "resumed silently:\n  rank 0 (from rank 0's state) yielded [2, 3] (2 samples) that the "
                            "2-rank world had already yielded in epoch 0"),
    # The same resume, logged: a second world pair of processes for a message's form (acceptance: the README's
    # suite is over its budget, and the silent case above fails SC31 the same way).
    pytest.param("warns_and_starts_over", "logged: WARNING", marks=pytest.mark.acceptance),
])
def test_a_loader_that_cannot_change_world_size_and_does_not_refuse_fails_sc31(name: str, says: str,
                                                                              tmp_path: Path) -> None:
    report = check_world(target(name), world_size=2, clauses=["SC31"], replay=MID_EPOCH)
    sc31 = report["SC31"]
    assert sc31.status == "failed", sc31.message
    assert sc31.message.startswith("SC31 world-size-change-is-exact-or-refused"), sc31.message
    assert "saved on 2 ranks, resumed on 1" in sc31.message
    assert says in sc31.message, sc31.message
    assert "f'rank{new.rank % 2}.pt'" in sc31.reproduction and "world_size=2" in sc31.reproduction
    assert "--clause SC31" in sc31.reproduction
    # Pasted, the reproduction replays both worlds rank by rank and fails SC31's own judgement; a loader that
    # reshards exactly runs the same lines clean (tests/reproductions.py).
    code = [line for line in sc31.reproduction.splitlines() if line and not line.startswith("#")]
    assert code[-1].startswith("assert_world_change("), sc31.reproduction
    assert run_here(sc31.reproduction, tmp_path / "broken") == "AssertionError", sc31.reproduction
    correct = sc31.reproduction.replace(f"['{name}']", "['global_position']")
    assert correct != sc31.reproduction and run_here(correct, tmp_path / "correct") == "ran clean"


@pytest.mark.acceptance
@pytest.mark.parametrize("name", ["refuses_another_world", "global_position"])
def test_a_loader_that_refuses_or_reshards_exactly_passes_sc30_and_sc31(name: str) -> None:
    # The refusal names both world sizes: strict, it passes SC41 too, with no advisory (the
    # bare KeyError of the next test gets one). One search judges the three.
    refuses = name == "refuses_another_world"
    wanted = ["SC30", "SC31", "SC41"] if refuses else ["SC30", "SC31", "SC32"]
    report = check_world(target(name), world_size=2, profile="dev", space=IN_PROCESS, strict=refuses, clauses=wanted)
    for cid in ("SC30", "SC31", "SC41") if refuses else ("SC30", "SC31"):
        assert report[cid].status == "passed", report[cid].message
    if not refuses:
        # Exact, but a 3-rank world deals the rest of the 2-rank world's epoch (cut to a multiple of 2) unevenly:
        # a rank runs out first and the others' collectives wait (SC32; PaddedReshard pads it, and passes).
        sc32 = report["SC32"]
        assert sc32.status == "failed" and "a fresh world of 3 ranks resumed" in sc32.message, sc32.message
    assert report["SC31"].examples >= 15
    assert "examples resumed again in 1 rank and 3 ranks" in report["SC31"].notes[-1], report["SC31"].notes
    if refuses:
        assert report["SC41"].examples >= 1 and not advisories(report["SC31"].notes + report["SC41"].notes)


# --- the horizon: the rest of the epoch and the next one ---------------------------------------------


def _resumed(*passes: list[int], consumed: list[int], due: list[int], next_due: list[int]) -> WorldResume:
    """A 2-rank world's state resumed on 1 rank, which yielded ``passes``."""
    return WorldResume(0, 0, 2, passes=list(passes), consumed=consumed, due=due, next_due=next_due)


def test_a_first_pass_that_ends_early_and_a_second_that_yields_the_rest_loses_nothing() -> None:
    # Samples 6 and 7 of epoch 0 come at the start of pass 2, and pass 2 still holds all of epoch 1: nothing
    # is lost over the horizon (SC31 judged one pass before, and counted them lost).
    values = [_resumed([4, 5], [6, 7, 0, 1, 2, 3, 4, 5, 6, 7], consumed=[0, 1, 2, 3], due=[4, 5, 6, 7],
                       next_due=list(range(8)))]
    judge_world_change(values, MID_EPOCH[0], Checkpoint(MID_EPOCH[1]))


def test_a_sample_missing_from_both_passes_is_lost_and_the_message_names_the_pass() -> None:
    values = [_resumed([4, 5], [0, 1, 2, 3, 4, 5, 6, 7], consumed=[0, 1, 2, 3], due=[4, 5, 6, 7],
                       next_due=list(range(8)))]
    with pytest.raises(ClauseViolation) as caught:
        judge_world_change(values, MID_EPOCH[0], Checkpoint(MID_EPOCH[1]))
    got = caught.value.got
    assert "pass 1 (the rest of epoch 0) over 1 rank: yielded 2 samples; lacks [6, 7] (2 samples) due in it" in got
    assert "pass 2 (epoch 1) over 1 rank: yielded 8 samples\n" in got + "\n"
    assert "over 1 rank and both passes: lost [6, 7] (2 samples), repeated none" in got
    assert caught.value.impact is not None and caught.value.impact.describe() == "silent: 2 samples lost in epoch 0"


# --- a fixed global batch (OLMo-core, Megatron) --------------------------------------------------


#: 9 samples, 2 per rank: a global batch of 4 on 2 ranks (8 samples an epoch); checkpointed after 1.
GLOBAL_BATCH_4 = (LoaderConfig(dataset_size=9, batch_size=2), Position(epoch=0, batches=1))
#: 13 samples, 3 per rank: a global batch of 6, which 1 and 3 ranks split evenly.
GLOBAL_BATCH_6 = (LoaderConfig(dataset_size=13, batch_size=3), Position(epoch=0, batches=1))


@pytest.mark.acceptance
def test_a_loader_that_deals_whole_global_batches_fails_sc31_when_the_per_rank_batch_stays_fixed() -> None:
    report = check_world(target("global_batches"), world_size=2, clauses=["SC31"], replay=GLOBAL_BATCH_4)
    sc31 = report["SC31"]
    assert sc31.status == "failed", sc31.message
    # On 3 ranks of 2 the global batch is 6: the 5 samples left make no whole one.
    assert "saved on 2 ranks, resumed on 3" in sc31.message
    assert "pass 1 (the rest of epoch 0) over 3 ranks: yielded 0 samples; lacks [4, 5, 6, 7] (4 samples)" in sc31.got


@pytest.mark.acceptance
@pytest.mark.parametrize("replay", [GLOBAL_BATCH_4, GLOBAL_BATCH_6], ids=["global-batch-4", "global-batch-6"])
def test_declared_a_fixed_global_batch_the_same_loader_passes_sc31(replay: tuple[LoaderConfig, Position]) -> None:
    report = check_world(target("global_batches"), world_size=2, clauses=["SC31"], replay=replay,
                         fixed_global_batch=True)
    sc31 = report["SC31"]
    assert sc31.status == "passed", sc31.message
    skipped = [a for a in advisories(sc31.notes) if "does not split evenly over 3 ranks" in a]
    assert len(skipped) == (replay is GLOBAL_BATCH_4), sc31.notes  # a global batch of 4 does not split over 3


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
def test_declared_a_fixed_global_batch_a_loader_that_counts_with_the_new_world_fails_naming_the_samples() -> None:
    report = check_world(target("counts_with_the_new_world"), world_size=2, clauses=["SC31"], replay=GLOBAL_BATCH_6,
                         fixed_global_batch=True)
    sc31 = report["SC31"]
    assert sc31.status == "failed", sc31.message
    # Rank 0 of 1 works out 1 step x 3 per rank x 1 rank = 3 samples consumed, where 6 were.
    assert "rank 0 (from rank 0's state) yielded [3, 4, 5] (3 samples) that the 2-rank world had already" in sc31.got
    assert "lacks [9, 10, 11] (3 samples) due in it" in sc31.got
    assert "# The global batch stays 6: 6 per rank on 1 rank" in sc31.reproduction
    assert "LoaderConfig(dataset_size=13, batch_size=6)" in sc31.reproduction
    assert "--fixed-global-batch" in sc31.reproduction


@pytest.mark.acceptance
def test_a_refusal_that_does_not_name_the_world_sizes_passes_sc31_with_one_advisory_and_fails_sc41() -> None:
    # A bare KeyError at iter() on the new world: refused before the first batch, nothing lost.
    report = check_world(target("keyed_by_shard_count"), world_size=2, clauses=["SC31", "SC41"], strict=True,
                         replay=MID_EPOCH)
    sc31 = report["SC31"]
    assert sc31.status == "passed", sc31.message
    advice = advisories(sc31.notes)
    assert len(advice) == 1, ("one advisory over both new worlds and every rank", sc31.notes)
    assert "(KeyError) does not name the two world sizes" in advice[0] and "ValueError(" in advice[0]
    sc41 = report["SC41"]
    assert sc41.status == "failed" and sc41.message.startswith("SC41 refusals-name-the-mismatch"), sc41.message
    assert "saved on 2 ranks, resumed on 1" in sc41.context and "KeyError: 'of_1'" in sc41.got, sc41.message


@pytest.mark.acceptance
#: Why the loaders built on `LoaderConfig.stateful_dataloader()` fail SC31 at world size 2.
@pytest.mark.parametrize("name", [pytest.param("stateful_dataloader", marks=pytest.mark.xdist_group(STATEFUL_DATALOADER_SEARCH)),
                                  "reference_wrapper"])
def test_the_base_loader_and_the_reference_wrapper_refuse_a_world_change_by_name(
        name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Under torch.distributed, `LoaderConfig.stateful_dataloader()` uses `DistributedBatchSampler` at
    every world size, one rank included, and that sampler refuses another world size's state by name.

    Before, the restart on one rank built torchdata's plain sampler, which loaded the 2-rank state
    by skipping its count of batches of another order: samples lost and repeated, silently.
    """
    # StatefulDataLoader's search judges SC30 too: tests/search/test_padding.py reads the same run.
    clauses = ("SC30", "SC31") if name == "stateful_dataloader" else ("SC31",)
    report = searched(tmp_path_factory, f"stateful_contract.reference.factories:{name}", clauses)
    assert report["SC31"].status == "passed", report["SC31"].message
    again = check_world(f"stateful_contract.reference.factories:{name}", world_size=2, clauses=["SC31"],
                        replay=(LoaderConfig(dataset_size=9, batch_size=1, shuffle=True, seed=6, grad_acc_step=6,
                                             generator="explicit"), Position(epoch=1, batches=1)))
    assert again["SC31"].status == "passed", again["SC31"].message


@pytest.mark.acceptance
def test_torchdata_s_distributed_sampler_passes_the_shared_dcp_key_and_fails_a_world_change_silently() -> None:
    entry = MULTI_RANK["stateful_distributed_sampler"]
    report = check_world(entry.target, world_size=entry.world_size, profile="dev", clauses=["SC30", "SC31"],
                         space=IN_PROCESS, expected_failures=entry.expected_failures)
    assert report["SC30"].status == "passed", report["SC30"].message
    sc31 = report["SC31"]
    assert sc31.status == "expected-failure", sc31.message
    assert "the new world resumed silently" in sc31.message, sc31.message


@pytest.mark.acceptance  # 14 s at load 5: the README's suite is over its budget without it
def test_a_restarted_world_that_never_comes_up_fails_the_example_not_the_check() -> None:
    module = Path(__file__).parents[1].joinpath("imports_on_two_ranks.py")
    report = check_world(f"{module}:factory", world_size=2, clauses=["SC31", "SC10"], replay=MID_EPOCH)
    sc31 = report["SC31"]
    assert sc31.status == "failed", sc31.message
    assert "cannot be imported on 1 ranks" in sc31.message, sc31.message
    assert "in the world1- phase" in sc31.message, sc31.message
    # The check goes on in its own 2 ranks, parked meanwhile, with the run's deadline counted again.
    assert report["SC10"].status == "passed", report["SC10"].message


def _ranks_by_phase() -> dict[str, int]:
    """This process's live rank processes (a check started here), counted by the phase they were started in
    (`rank_main`'s arguments: the run directory, then the phase's name)."""
    ranks: dict[str, int] = {}
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            command = child.cmdline()
            if RANK_MAIN in command:
                phase = command[command.index(RANK_MAIN) + 2]
                ranks[phase] = ranks.get(phase, 0) + 1
    return ranks


@pytest.mark.acceptance  # 25 s at load 5 (SC31, SC10, SC32 and SC42 on 2 ranks): the README's suite is over its budget
def test_the_check_goes_on_in_the_ranks_it_parked_while_other_world_sizes_resumed(tmp_path: Path) -> None:
    # SC31 resumes on 1 rank, then on 3, in fresh processes; the 2 ranks that searched wait meanwhile, and
    # SC10 (after SC31) runs in them, not in 2 new ones (issue 32: 2 of a default check's 13 rank start-ups).
    # SC32 resumes its own states on 3 ranks in SC31's world of 3, idle meanwhile: it saved none of them.
    # An idle world lives only while a later clause resumes on its size: the world of 1 ends with SC31, the
    # world of 3 with SC32, judged right after SC31 to reuse it (they held 4 ranks' memory to the end of the
    # check, about 940 MB).
    run_dir = tmp_path / "run"
    alive: dict[str, dict[str, int]] = {}

    def at_start(event: Progress) -> None:
        if event.status is None and event.done == 0:
            alive[event.clause_id] = _ranks_by_phase()

    report = check_world("stateful_contract.reference.factories:reference_wrapper", world_size=2,
                         clauses=["SC31", "SC10", "SC32", "SC42"], replay=MID_EPOCH, run_dir=run_dir,
                         progress=at_start)
    for cid in ("SC31", "SC10", "SC32", "SC42"):
        assert report[cid].status == "passed", report[cid].message
    assert "examples resumed again in 1 rank and 3 ranks" in report["SC31"].notes[-1], report["SC31"].notes
    assert "examples resumed again in 3 ranks" in report["SC32"].notes[-1], report["SC32"].notes
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == ["search", "world1-", "world3-"]
    assert list(alive) == ["SC01", "SC31", "SC32", "SC18", "SC10", "SC42"], alive
    assert alive["SC32"] == {"search": 2, "world3-": 3}, alive  # no later clause resumes on 1 rank
    assert alive["SC18"] == alive["SC42"] == {"search": 2}, alive  # nor on 3, once SC32 has
    assert any("phases search + world1- + world3-" in note for note in report.notes), report.notes  # ended cleanly
    assert processes_of(run_dir) == []  # the parked ranks too, once the check is over
