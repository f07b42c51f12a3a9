"""SC10's second half: states resumed in a process that never ran the loader, as a real resume is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import zoo

from stateful_contract import ConfigSpace, check
from stateful_contract.reference import factories

IN_PROCESS = ConfigSpace(num_workers=(0,))


def test_a_state_that_is_a_handle_into_its_process_fails_sc10_in_a_fresh_process():
    report = check(zoo.ProcessLocalState, clauses=["SC10"], space=IN_PROCESS)
    result = report["SC10"]
    assert result.status == "failed" and not report.passed
    assert "resumed in a fresh process" in result.message, result.message
    assert "the state is only good in the process that took it" in result.message
    assert result.reproduction.startswith("# Fails only when the resume runs in a fresh")
    assert "save_checkpoint(state, 'state.pt')" in result.reproduction
    assert "state = load_checkpoint('state.pt')" in result.reproduction


def test_the_printed_two_process_reproduction_fails_as_reported(tmp_path):
    """The commented first half, run in one process, then the rest in another: it fails there, and
    passes when both halves run in one process."""
    result = check(zoo.ProcessLocalState, clauses=["SC10"], space=IN_PROCESS)["SC10"]
    lines = result.reproduction.splitlines()
    imports = [line for line in lines if line.startswith(("from ", "import "))]
    config = next(line for line in lines if line.startswith("config = "))
    first = [line.removeprefix("#     ") for line in lines if line.startswith("#     ")]
    second = [line for line in lines if line and not line.startswith("#") and line not in imports
              and line != config]
    run = {"first": "\n".join([*imports, config, *first]), "second": "\n".join([*imports, config, *second])}
    for name, code in run.items():
        (tmp_path / f"{name}.py").write_text(code)
    tests = str(Path(zoo.__file__).parent)  # the zoo's module, as the reproduction imports it
    kw = {"cwd": tmp_path, "capture_output": True, "text": True, "env": {**os.environ, "PYTHONPATH": tests}}
    assert subprocess.run([sys.executable, "first.py"], **kw).returncode == 0
    second_run = subprocess.run([sys.executable, "second.py"], **kw)
    assert second_run.returncode == 1 and "AssertionError" in second_run.stderr, second_run.stderr
    both = subprocess.run([sys.executable, "-c", run["first"] + "\n" + "\n".join(second)], **kw)
    assert both.returncode == 0, "in one process the same steps pass: " + both.stderr


def test_correct_loaders_resume_in_a_fresh_process_too_and_the_report_says_so():
    for factory in (zoo.epoch_loader, factories.reference_wrapper):
        result = check(factory, clauses=["SC10"], space=IN_PROCESS)["SC10"]
        assert result.status == "passed", result.message
        assert any(n.endswith("examples resumed again in a fresh process") for n in result.notes), result.notes


def test_an_in_process_check_says_it_could_not_resume_in_a_fresh_process():
    result = check(zoo.ProcessLocalState, clauses=["SC10"], space=IN_PROCESS, isolation="in-process")["SC10"]
    assert result.status == "passed"
    assert any("not resumed again in a fresh process" in n for n in result.notes), result.notes
