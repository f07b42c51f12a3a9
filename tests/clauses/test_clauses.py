"""Every clause can fail, with its own ID, and correct loaders pass every clause."""

from __future__ import annotations

import pytest
import zoo
import zoo_kills

from stateful_contract import ConfigSpace, check
from stateful_contract.reference import factories
from stateful_contract.repro.advice import advisories

IN_PROCESS = zoo_kills.IN_PROCESS
#: The space a clause is searched in here: in-process, except SC23 and SC41, which change the
#: worker count (`zoo_kills.space_for`).
SPACES = {"SC23": zoo_kills.space_for("SC23"), "SC41": zoo_kills.space_for("SC41")}
WORKERS = ConfigSpace(num_workers=(1, 2), dataset_size=(1, 12))


@pytest.mark.parametrize(("loader", "clause_id"), [pytest.param(loader, clause_id, marks=zoo_kills.group(loader))
                                                   for loader, clause_id in zoo.KILLS.items()],
                         ids=lambda v: getattr(v, "__name__", v))
def test_each_broken_loader_is_killed_by_its_clause(loader, clause_id, tmp_path_factory):
    report = zoo_kills.killed(tmp_path_factory, loader)  # the search test_impact and test_engine read too
    result = report[clause_id]
    assert result.status == "failed", (result.status, result.message)
    assert result.message.startswith(clause_id), result.message
    assert "Expected:" in result.message and "Got:" in result.message, result.message
    assert not report.passed


def test_every_clause_has_a_broken_loader():
    from stateful_contract import CLAUSES

    killed = set(zoo.KILLS.values())
    single_rank = {c.id for c in CLAUSES if c.tier != "distributed"}
    assert single_rank <= killed, f"clauses no broken loader kills: {sorted(single_rank - killed)}"


#: Clauses that judge only loaders with some feature, and the correct loaders without it.
#: No set_epoch on these.
NOT_FOR = {"SC21": {"hand-written", "numpy and dataclass batches", "StatefulDataLoader", "PrefetchGradAccDataLoader"}}


def _not_passed(report, name):
    return {r.id: r.message for r in report.results if r.status not in ("passed", "skipped")
            and not (r.status == "not-judged" and name in NOT_FOR.get(r.id, ()))}


# Whole searches of correct loaders, every core clause each: `nox -s acceptance` (pyproject's `acceptance`
# marker), which CI runs. StatefulDataLoader's, the last one left in `nox -s tests`, was among its costliest
# tests (33 s at load 9, 2026-12-07); it is also checked with worker processes below, in acceptance.
@pytest.mark.acceptance
@pytest.mark.parametrize(("factory", "name"), [
    (zoo.epoch_loader, "hand-written"),
    (zoo.set_epoch_loader, "hand-written with set_epoch"),
    (zoo.numpy_batches, "numpy and dataclass batches"),
    (factories.stateful_dataloader, "StatefulDataLoader"),
    (factories.reference_wrapper, "PrefetchGradAccDataLoader"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_correct_loaders_pass_every_core_clause_in_process(factory, name):
    report = check(factory, space=IN_PROCESS)
    failures = _not_passed(report, name)
    # One worker count in the space: no other to resume with, and the report says so.
    assert failures.pop("SC23").startswith("the configuration space allows one number of worker processes")
    assert not failures
    assert report.passed
    assert all(report[c].examples >= 20 for c in ("SC10", "SC11", "SC17")), "the search must really run"
    if name not in NOT_FOR["SC21"]:
        assert report["SC21"].status == "passed" and report["SC21"].examples >= 20


def test_a_loader_without_set_epoch_is_not_judged_by_sc21_and_says_why():
    report = check(zoo.epoch_loader, clauses=["SC21"], space=IN_PROCESS)
    result = report["SC21"]
    # SC21 was the one clause selected: a run that judged nothing does not pass (docs/clauses.md, "Checkpoint policies").
    assert result.status == "not-judged" and report.judged_nothing and not report.passed
    assert "has no set_epoch" in result.message and "sampler" in result.message
    assert result.examples == 1, "not judgeable is a verdict on the loader: nothing to shrink"


@pytest.mark.acceptance
@pytest.mark.parametrize("factory", [factories.stateful_dataloader, factories.reference_wrapper],
                         ids=["StatefulDataLoader", "PrefetchGradAccDataLoader"])
def test_correct_loaders_pass_with_worker_processes(factory):
    # No declarations: torchdata refuses 1 <-> 2 workers with a bare assert (F13), a refusal that
    # loses nothing, so SC23 passes it; the reference wrapper names the counts.
    report = check(factory, space=WORKERS, profile="dev")
    assert not _not_passed(report, "StatefulDataLoader" if factory is factories.stateful_dataloader
                           else "PrefetchGradAccDataLoader")
    assert report.passed and not report.deviations
    assert report["SC10"].examples >= 2


@pytest.mark.acceptance
def test_a_strict_loader_passes_the_strict_tier():
    report = check(zoo.StrictEpochLoader, space=IN_PROCESS, strict=True)
    assert report["SC40"].status == "passed", report["SC40"].message
    assert report.passed


def test_statefuldataloader_accepts_bad_states_silently_so_fails_the_strict_tier():
    report = check(factories.stateful_dataloader, clauses=["SC40"], space=IN_PROCESS, strict=True)
    assert report["SC40"].status == "failed"
    assert "accepted silently" in report["SC40"].message


class HandsTorchdataStateThrough:
    """A wrapper that passes StatefulDataLoader's state through, as most wrappers do."""

    def __init__(self, config):
        self.base = config.stateful_dataloader()

    def __iter__(self):
        return iter(self.base)

    def state_dict(self):
        return self.base.state_dict()

    def load_state_dict(self, state):
        self.base.load_state_dict(state)


def test_a_wrapper_inheriting_torchdatas_bare_assert_passes_sc23_with_one_advisory_and_fails_sc41():
    # 1 <-> 2 workers: torchdata refuses with `assert` and no message (F13): nothing is lost.
    report = check(HandsTorchdataStateThrough, clauses=["SC23", "SC41"], profile="dev", seed=3, strict=True,
                   space=ConfigSpace(num_workers=(1, 2), dataset_size=(2, 8)))
    result = report["SC23"]
    assert result.status == "passed", result.message
    advice = advisories(result.notes)
    assert len(advice) == 1 and result.examples > 1, ("one advisory over every example", result.notes)
    assert "does not name the two worker counts" in advice[0] and "AssertionError" in advice[0]
    assert "raised inside torchdata's StatefulDataLoader" in advice[0] and "F13" in advice[0]
    assert "ValueError(" in advice[0], "the advisory says how to fix it"
    strict = report["SC41"]
    assert strict.status == "failed" and strict.message.startswith("SC41 refusals-name-the-mismatch")
    assert "a bare AssertionError with no message" in strict.got and "torchdata" in strict.got
    assert "the refusal to name the two worker counts (1 and 2)" in strict.expected or (
        "(2 and 1)" in strict.expected), strict.expected
    own = check(zoo.RefusesWorkerChangeBare, clauses=["SC23"], space=SPACES["SC23"])["SC23"]
    assert own.status == "passed" and "torchdata" not in " ".join(own.notes), "the hint is only for torchdata's assert"
    assert len(advisories(own.notes)) == 1


def test_a_refusal_by_name_passes_sc23_and_sc41_without_an_advisory():
    report = check(zoo.RefusesWorkerChangeByName, clauses=["SC23", "SC41"], space=SPACES["SC23"], strict=True)
    assert report["SC23"].status == report["SC41"].status == "passed"
    assert not advisories(report["SC23"].notes + report["SC41"].notes)


def test_a_loader_whose_order_depends_on_num_workers_passes_sc23_when_later_epochs_follow_the_new_count():
    """As litdata resumes (litData#878): the rest of the interrupted epoch is the samples still due, in
    the new count's order, and later epochs are the new count's."""
    space = ConfigSpace(num_workers=(0, 1, 2), dataset_size=(4, 12), batch_size=(1, 3))
    report = check(zoo.WorkerOrderedEpochs, clauses=["SC10", "SC23"], space=space)
    assert report["SC23"].status == "passed", report["SC23"].message
    assert report["SC10"].status == "passed", report["SC10"].message
    broken = check(zoo.SkipsTheOffsetInTheNewOrder, clauses=["SC23"], space=space)["SC23"]
    assert broken.status == "failed", broken.message
    assert "samples still due, once each, in any order" in broken.expected and "lost [" in broken.got
    assert "uninterrupted(factory, LoaderConfig(" in broken.reproduction, broken.reproduction


class GeneratorIter(HandsTorchdataStateThrough):
    """The wrapper most people write: ``__iter__`` a generator, so the base's new pass starts late."""

    def __iter__(self):
        yield from self.base


class EagerIter(HandsTorchdataStateThrough):
    def __iter__(self):
        it = iter(self.base)
        return (batch for batch in it)


def test_a_generator_iter_fails_sc22_and_is_told_why_and_the_eager_form_passes():
    result = check(GeneratorIter, clauses=["SC22"], space=IN_PROCESS)["SC22"]
    assert result.status == "failed", result.message
    assert "right after iter()" in result.message and "__iter__ is a generator function" in result.message
    assert check(EagerIter, clauses=["SC22"], space=IN_PROCESS)["SC22"].status == "passed"
    lazy = check(zoo.LazyNewPass, clauses=["SC22"], space=IN_PROCESS)["SC22"]
    assert lazy.status == "failed" and "generator function" not in lazy.message, "the hint names a cause it saw"
