"""Narrowing the configuration space from the command line (``--config-space``), as a test class's
``config_space`` does: one parser (`ConfigSpace.parse`), clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateful_contract import ConfigSpace
from stateful_contract.faces.cli import main


@pytest.mark.parametrize(("text", "space"), [
    ("num_workers=0,2 grad_acc_step=1..8", ConfigSpace(num_workers=(0, 2), grad_acc_step=(1, 8))),
    ("num_workers=0", ConfigSpace(num_workers=(0,))),
    ("num_workers=0..2", ConfigSpace(num_workers=(0, 1, 2))),
    ("num_workers=2,0,2", ConfigSpace(num_workers=(0, 2))),
    ("dataset_size=4..12 batch_size=2", ConfigSpace(dataset_size=(4, 12), batch_size=(2, 2))),
])
def test_the_text_narrows_the_default_space(text: str, space: ConfigSpace) -> None:
    assert ConfigSpace.parse(text) == space
    assert ConfigSpace.parse(text.split()) == space


@pytest.mark.parametrize(("text", "says"), [
    ("", "takes NAME=VALUES items"),
    ("workers=0,2", "NAME one of num_workers, dataset_size, batch_size, grad_acc_step"),
    ("num_workers", "takes NAME=VALUES items"),
    ("num_workers=0,two", "num_workers takes whole numbers >= 0, got 'two'"),
    ("grad_acc_step=0..4", "grad_acc_step takes whole numbers >= 1, got '0'"),
    ("grad_acc_step=8..1", "grad_acc_step=8..1 is an empty range"),
    ("batch_size=1,2", "batch_size takes a range LOW..HIGH or one number"),
    ("num_workers=0 num_workers=2", "names num_workers twice"),
    ("pkg.loaders:factory", "takes NAME=VALUES items"),
])
def test_a_wrong_space_is_refused_saying_what_it_takes(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(".", r"\.")):
        ConfigSpace.parse(text)


def test_the_command_line_narrows_the_space_and_a_wrong_one_is_a_usage_line(tmp_path: Path, capsys) -> None:
    report = tmp_path / "r.json"
    assert main(["check", "zoo:epoch_loader", "--quiet", "--profile", "dev", "--clause", "SC10",
                 "--config-space", "num_workers=0", "dataset_size=3..5", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["num_workers"] == [0]
    configs = [c for c in data["clauses"] if c["id"] == "SC10"]
    assert configs[0]["coverage"].get("with-workers", 0) == 0  # no worker example was drawn
    capsys.readouterr()
    assert main(["check", "zoo:epoch_loader", "--config-space", "num_workers=-1"]) == 2
    assert "--config-space num_workers takes whole numbers >= 0, got '-1'" in capsys.readouterr().err
