"""What a user declares of their trainer on several ranks, from every face: the command line, a pytest
class's attributes and `check`'s keywords build the same `CheckOptions`, the clauses that read a
declaration get it bound (`Clause.declared`), and the report says what was declared."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import ClassVar

import pytest

from stateful_contract import CheckOptions, OptionError, Report
from stateful_contract.clauses import CLAUSES, clause
from stateful_contract.faces.cli import main
from stateful_contract.faces.testing import StatefulLoaderContract, class_options

DECLARED = {"fixed_global_batch": True, "joins_uneven_inputs": True, "checkpoint_layout": "per-rank-files",
            "trainer_shape": ("loads-fresh",)}


class TestDeclared(StatefulLoaderContract):
    __test__ = False  # a class to read the options of, not one to run
    fixed_global_batch: ClassVar[bool] = True
    joins_uneven_inputs: ClassVar[bool] = True
    checkpoint_layout = "per-rank-files"
    trainer_shape = "loads-fresh"  # a class writes one fact as a string, as a command line does


def test_every_face_declares_the_same_options(tmp_path: Path) -> None:
    keywords = CheckOptions(**DECLARED)  # type: ignore[arg-type]
    assert keywords.declarations == class_options(TestDeclared).declarations == DECLARED
    # The command line's flags, as a user runs them: its report says what was declared, as check()'s does.
    report = tmp_path / "report.json"
    main(["check", "stateful_contract.reference.factories:stateful_dataloader", "--fixed-global-batch",
          "--joins-uneven-inputs", "--checkpoint-layout", "per-rank-files", "--trainer-shape", "loads-fresh", "--clause", "SC01", "--in-process",
          "--quiet", "--json", str(report)])
    noted = [n for n in Report.from_json(report).notes if n.startswith("declared: ")]
    assert noted == keywords.declared_notes
    assert CheckOptions().declarations == {"fixed_global_batch": False, "joins_uneven_inputs": False,
                                           "checkpoint_layout": None, "trainer_shape": ()}
    assert CheckOptions().declared_notes == []  # nothing declared: StatefulDataLoader's semantics, nothing noted
    assert keywords.declared_notes == [
        "declared: the trainer keeps the global batch fixed when the world size changes: SC31 and SC32 resume M "
        "ranks with per-rank batch = global / M",
        "declared: the trainer handles ranks with uneven batch counts (DDP's Join): SC32 does not apply",
        "declared: the trainer saves the loader's state as per-rank-files: SC30 judges that layout alone",
        "declared: the trainer's shape is loads-fresh: a clause that judges only calls such a trainer never makes "
        "is not judged, and says why, and no checkpoint is drawn where such a trainer never saves"]


@pytest.mark.parametrize("name, value", [("fixed_global_batch", "yes"), ("joins_uneven_inputs", 1),
                                         ("checkpoint_layout", "dcp-everywhere"), ("trainer_shape", "rollback"),
                                         ("trainer_shape", 3)])
def test_a_wrong_declaration_is_refused_before_anything_runs(name: str, value: object) -> None:
    with pytest.raises(OptionError) as caught:
        CheckOptions(**{name: value})  # type: ignore[arg-type]
    assert caught.value.option == name


def test_a_clause_gets_only_the_declarations_it_reads_and_they_cross_to_the_ranks() -> None:
    sc31 = clause("SC31").declared(CheckOptions(**DECLARED).declarations)  # type: ignore[arg-type]
    assert sc31 is not clause("SC31")  # bound: its fresh-process half takes the declaration
    restarted = sc31.restarted()
    assert restarted is not None and restarted.scenario.keywords == {"fixed_global_batch": True}  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(restarted)).scenario.keywords == {"fixed_global_batch": True}
    assert clause("SC10").declared(CheckOptions(**DECLARED).declarations) is clause("SC10")  # type: ignore[arg-type]
    assert clause("SC32").waived(CheckOptions(joins_uneven_inputs=True).declarations) == (
        "does not apply: the trainer handles ranks with uneven batch counts (DDP's Join) (declared)")
    assert clause("SC32").waived(CheckOptions().declarations) is None
    assert clause("SC32").waived(CheckOptions(joins_uneven_inputs=True).declarations, endless=True) is None


def test_a_trainer_shape_waives_only_the_clauses_that_judge_a_call_it_never_makes() -> None:
    fresh = CheckOptions(trainer_shape=["loads-fresh"]).declarations
    assert clause("SC20").waived(fresh) == (
        "does not apply: your trainer loads a checkpoint only into a freshly built loader, before its first iter(), "
        "and never reloads into one it has iterated (no rollback or retry into the same object) (declared)")
    assert clause("SC20").waived(fresh, endless=True) is not None  # an endless loader is loaded fresh too
    assert clause("SC20").waived(CheckOptions().declarations) is None  # the default judges StatefulDataLoader's semantics
    assert [c.id for c in CLAUSES if c.waived(fresh) is not None] == ["SC20"]
    assert CheckOptions(trainer_shape="loads-fresh, LOADS-FRESH").trainer_shape == ("loads-fresh",)
