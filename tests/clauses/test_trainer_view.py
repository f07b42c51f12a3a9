"""The trainer's state: a loader whose resume needs the epoch its trainer keeps, and the trainer's call at
each epoch (``--epoch-hook``), checked through a `TrainerView` (docs/quickstart.md, "State the trainer keeps")."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from stateful_contract import ConfigSpace, Report, check
from stateful_contract.faces.cli import main
from stateful_contract.run.options import CheckOptions, OptionError

ONE_PROCESS = ConfigSpace(num_workers=(0,))
QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def sc21(target: str, tmp_path: Path, *args: str) -> tuple[int, Report]:
    path = tmp_path / "r.json"
    code = main(["check", target, "--quiet", "--profile", "dev", "--clause", "SC21", "--jobs", "1",
                 "--config-space", "num_workers=0", "--json", str(path), *args])
    return code, Report.from_json(path)


def test_sc21_judges_the_declared_hook_of_a_loader_whose_trainer_keeps_the_epoch(tmp_path: Path) -> None:
    code, report = sc21("policy_loaders:reshuffled", tmp_path, "--epoch-hook", "reshuffle")
    assert code == 0 and report["SC21"].status == "passed" and report["SC21"].examples > 1


def test_without_the_declaration_sc21_is_not_judged_and_says_how_to_declare_the_hook(tmp_path: Path) -> None:
    code, report = sc21("policy_loaders:reshuffled", tmp_path)
    assert report["SC21"].status == "not-judged" and "TrainerView has no set_epoch" in report["SC21"].message
    assert "declare it (--epoch-hook NAME)" in report["SC21"].message
    assert code == 5 and report.judged_nothing  # SC21 alone, not judged: the check says nothing (exit 5)


def test_a_view_that_forgets_to_reshuffle_on_resume_fails_sc21_with_a_reproduction_that_fails(tmp_path: Path,
                                                                                             capsys) -> None:
    code, report = sc21("policy_loaders:forgets_to_reshuffle", tmp_path, "--epoch-hook", "reshuffle")
    result = report["SC21"]
    assert code == 1 and result.status == "failed"
    assert "replayed" in result.got and result.impact is not None and result.impact.kind == "silent"
    assert "hook='reshuffle'" in result.reproduction
    with pytest.raises(AssertionError):  # the printed program fails where the clause did
        exec(compile(result.reproduction, "<reproduction>", "exec"), {})


def test_a_declared_hook_the_loader_lacks_fails_as_the_trainers_call_would(tmp_path: Path) -> None:
    code, report = sc21("zoo:set_epoch_loader", tmp_path, "--epoch-hook", "reshuffle")
    result = report["SC21"]
    assert code == 1 and result.status == "failed"
    assert "loader.reshuffle(0) raised AttributeError" in result.got and "declared epoch hook" in result.got


@pytest.mark.parametrize("bad", ["", "re shuffle", "class", 3])
def test_the_hook_must_be_a_method_name(bad: object) -> None:
    with pytest.raises(OptionError, match="epoch_hook takes the name of a method"):
        CheckOptions(epoch_hook=bad)  # type: ignore[arg-type]


def test_the_mixin_declares_the_hook_as_a_class_attribute() -> None:
    from stateful_contract.faces.testing import StatefulLoaderContract, class_options

    class TestReshuffled(StatefulLoaderContract):
        epoch_hook = "reshuffle"

    assert class_options(TestReshuffled).epoch_hook == "reshuffle"


def test_the_quickstarts_trainer_view_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    import policy_loaders

    section = QUICKSTART.read_text(encoding="utf-8").split("## State the trainer keeps", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    data = types.ModuleType("mypkg.data")
    data.ReshufflingLoader = policy_loaders.ReshufflingLoader  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mypkg", types.ModuleType("mypkg"))
    monkeypatch.setitem(sys.modules, "mypkg.data", data)
    namespace: dict[str, object] = {}
    exec(compile(code.group(1), "docs/quickstart.md", "exec"), namespace)
    # No example limit: a verdict here must not depend on the machine's load (the view is not a hang probe).
    report = check(namespace["factory"], epoch_hook="reshuffle", profile="dev", space=ONE_PROCESS, jobs=1,  # type: ignore[arg-type]
                   isolation="in-process", timeout=0)
    assert report.passed and report["SC21"].status == "passed", [(r.id, r.status, r.message) for r in report.results
                                                                  if r.status not in ("passed", "skipped")]


def test_the_view_keeps_the_trainers_counters_and_calls_the_hook_before_the_loaders_load() -> None:
    from stateful_contract import TrainerView

    calls: list[str] = []

    class Recorded:
        def __init__(self) -> None:
            self.batches = [10, 11]

        def reshuffle(self, epoch: int) -> None:
            calls.append(f"reshuffle({epoch})")

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(self.batches)

        def state_dict(self) -> dict[str, int]:
            return {"inner": 1}

        def load_state_dict(self, state: dict[str, int]) -> None:
            calls.append(f"load({state})")

    view = TrainerView(Recorded(), hook="reshuffle")
    assert list(view) == [10, 11] and list(view) == [10, 11]  # each pass: the hook, then the loader's pass
    assert calls == ["reshuffle(0)", "reshuffle(1)"]
    assert view.state_dict() == {"loader": {"inner": 1}, "epoch": 2, "steps": 4}
    view.reshuffle(5)  # the trainer's loop, under the hook's own name
    it = iter(view)  # announced already: no second call
    assert calls[-1] == "reshuffle(5)" and next(it) == 10
    calls.clear()
    fresh = TrainerView(Recorded(), hook="reshuffle")
    fresh.load_state_dict({"loader": {"inner": 1}, "epoch": 3, "steps": 7})
    assert calls == ["reshuffle(3)", "load({'inner': 1})"] and (fresh.epoch, fresh.steps) == (3, 7)
    with pytest.raises(AttributeError):
        fresh.set_epoch  # noqa: B018  (the view answers to the declared hook only)


def test_after_load_the_view_loads_first_and_the_next_pass_calls_the_hook_with_its_keywords() -> None:
    from stateful_contract import TrainerView

    calls: list[str] = []

    class Recorded:
        def reshuffle(self, epoch: int, **kwargs: object) -> None:
            calls.append(f"reshuffle({epoch}, {kwargs})")

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter([10])

        def state_dict(self) -> dict[str, int]:
            return {"inner": 1}

        def load_state_dict(self, state: dict[str, int]) -> None:
            calls.append(f"load({state})")

    view = TrainerView(Recorded(), hook="reshuffle", first_epoch=1, hook_at_resume="after_load",
                       hook_kwargs={"in_memory": True})
    view.load_state_dict({"loader": {"inner": 1}, "epoch": 3, "steps": 7})
    assert calls == ["load({'inner': 1})"]  # OLMo-core's Trainer.load_state_dict: no reshuffle yet
    assert list(view) == [10]  # fit() -> _fit_epoch(): reshuffle(self.epoch), then the pass
    assert calls == ["load({'inner': 1})", "reshuffle(4, {'in_memory': True})"]
    with pytest.raises(ValueError, match="hook_at_resume is one of before_load, after_load"):
        TrainerView(Recorded(), hook="reshuffle", hook_at_resume="later")
