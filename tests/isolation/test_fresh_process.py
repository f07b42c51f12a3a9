"""SC10's second half: states resumed in a process that never ran the loader, as a real resume is."""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
import zoo
import zoo_kills
from shared import once

from stateful_contract import ConfigSpace, check
from stateful_contract.isolation import interpreter
from stateful_contract.isolation.sibling import PendingSibling
from stateful_contract.reference import factories

IN_PROCESS = ConfigSpace(num_workers=(0,))


@zoo_kills.group(zoo.ProcessLocalState)
def test_a_state_that_is_a_handle_into_its_process_fails_sc10_in_a_fresh_process(tmp_path_factory):
    report = zoo_kills.killed(tmp_path_factory, zoo.ProcessLocalState)  # test_clauses' kill, searched once
    result = report["SC10"]
    assert result.status == "failed" and not report.passed
    assert "resumed in a new interpreter" in result.message, result.message
    assert "the state is only good in the process that took it" in result.message
    assert result.reproduction.startswith("# Fails only when the resume runs in a fresh")
    assert "save_checkpoint(state, 'state.pt')" in result.reproduction
    assert "state = load_checkpoint('state.pt')" in result.reproduction


#: The first process, as the reproduction starts it: ``subprocess.run([sys.executable, "-c", """<its program>"""] ...``.
_CHILD = re.compile(r'^subprocess\.run\(\[sys\.executable, "-c", """\n(.*?)\n"""\].*?\)$', re.MULTILINE | re.DOTALL)


def _write_the_two_programs(reproduction: str, folder: Path) -> tuple[dict[str, str], list[str]]:
    """``first.py`` (the program the reproduction runs as its child process) and ``second.py`` (the rest, which
    it runs itself), each with its imports and the config; returns both sources and the second's own lines."""
    child = _CHILD.search(reproduction)
    assert child is not None, reproduction
    lines = _CHILD.sub("", reproduction).splitlines()
    imports = [line for line in lines if line.startswith(("from ", "import "))]
    config = next(line for line in lines if line.startswith("config = "))
    second = [line for line in lines if line and not line.startswith("#") and line not in imports and line != config]
    run = {"first": child.group(1), "second": "\n".join([*imports, config, *second])}
    for name, code in run.items():
        (folder / f"{name}.py").write_text(code)
    return run, second


@zoo_kills.group(zoo.ProcessLocalState)
def test_the_printed_two_process_reproduction_fails_as_reported(tmp_path, tmp_path_factory):
    """The first half (the reproduction's child process), run in one process, then the rest in another: it
    fails there, and passes when both halves run in one process."""
    result = zoo_kills.killed(tmp_path_factory, zoo.ProcessLocalState)["SC10"]
    run, _ = _write_the_two_programs(result.reproduction, tmp_path)
    tests = str(Path(zoo.__file__).parent)  # the zoo's module, as the reproduction imports it
    kw = {"cwd": tmp_path, "capture_output": True, "text": True, "env": {**os.environ, "PYTHONPATH": tests}}
    assert subprocess.run([sys.executable, "first.py"], **kw).returncode == 0
    second_run = subprocess.run([sys.executable, "second.py"], **kw)
    assert second_run.returncode == 1 and "AssertionError" in second_run.stderr, second_run.stderr
    both = subprocess.run([sys.executable, "-c", run["first"] + "\n" + run["second"]], **kw)
    assert both.returncode == 0, "in one process the same steps pass: " + both.stderr


def _zygote_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Who asks for this process's zygote from now on: ``held`` (a search whose first examples held, so that
    the import overlaps the rest of it) or ``start`` (the fresh half, when its sibling starts)."""
    callers: list[str] = []
    prepare = interpreter.prepare

    def recorded() -> Any:
        callers.append(inspect.stack()[1].function)
        return prepare()

    monkeypatch.setattr(interpreter, "prepare", recorded)
    return callers


def test_correct_loaders_resume_in_a_fresh_process_too_and_the_report_says_so(monkeypatch):
    callers = _zygote_starts(monkeypatch)
    for factory in (zoo.epoch_loader, factories.reference_wrapper):
        callers.clear()
        result = check(factory, clauses=["SC10"], space=IN_PROCESS)["SC10"]
        assert result.status == "passed", result.message
        assert any("examples resumed again in a fresh process (a new interpreter, PYTHONHASHSEED=" in n
                   for n in result.notes), result.notes
        # Its zygote was asked for while the search still ran, not only once the fresh half needed it.
        assert callers[:1] == ["held"] and callers.count("held") == 1, callers


def test_a_search_that_fails_early_starts_no_new_interpreter(monkeypatch):
    """A broken loader's SC10 fails in its first examples and has no fresh half: importing torch in a zygote
    for it would cost 3.4 s of CPU and judge nothing (the supervision table's commands each paid it)."""
    callers = _zygote_starts(monkeypatch)
    result = check(zoo.OffByOneResume, clauses=["SC10"], space=IN_PROCESS)["SC10"]
    assert result.status == "failed", result.message
    assert callers == [], callers


def test_the_zygote_starts_once_a_quarter_of_the_search_held(monkeypatch):
    callers = _zygote_starts(monkeypatch)
    pending = PendingSibling(cast(Any, object()))
    pending.held(9, 40)
    assert callers == []
    pending.held(10, 40)
    pending.held(11, 40)
    assert callers == ["held"]


def test_an_in_process_check_says_it_could_not_resume_in_a_fresh_process():
    result = check(zoo.ProcessLocalState, clauses=["SC10"], space=IN_PROCESS, isolation="in-process")["SC10"]
    assert result.status == "passed"
    assert any("not resumed again in a fresh process" in n for n in result.notes), result.notes


def _check_in_a_subprocess(factory: str, hash_seed: str, tmp_path: Path) -> dict:
    """``check(factory, clauses=["SC10"])`` in a process with a pinned string hash seed, as its JSON report."""
    code = (f"import json, zoo; from stateful_contract import ConfigSpace, check\n"
            f"r = check(zoo.{factory}, clauses=['SC10'], space=ConfigSpace(num_workers=(0,)))\n"
            f"print(json.dumps(r.to_dict()))")
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(Path(zoo.__file__).parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


#: The tests that read `hash_ordered_sc10`: on one worker, which checks it once (a module's fixture runs once per
#: xdist worker: the two tests on two workers ran this check twice, 24 s each at load 9, 2026-12-07).
HASH_ORDERED = pytest.mark.xdist_group("fresh-process-hash-ordered")


@pytest.fixture
def hash_ordered_sc10(tmp_path_factory):
    """SC10 of `zoo.HashOrderedShards`, checked in a process whose hash seed is pinned to 0 (so the verdict and
    the reported example are the same every run), once a session (`shared.once`)."""
    def run_it() -> dict:
        report = _check_in_a_subprocess("HashOrderedShards", "0", tmp_path_factory.mktemp("hash-order"))
        return next(c for c in report["clauses"] if c["id"] == "SC10")

    return once(tmp_path_factory, "fresh-process-hash-ordered-sc10", run_it)


@HASH_ORDERED
def test_a_stream_ordered_by_the_string_hash_seed_fails_sc10_in_a_new_interpreter(hash_ordered_sc10):
    """Forked processes share the checker's hash seed; the fresh process is a new interpreter with another."""
    sc10 = hash_ordered_sc10
    assert sc10["status"] == "failed", sc10
    assert "resumed in a new interpreter (run with PYTHONHASHSEED=1" in sc10["message"], sc10["message"]
    assert "the stream itself depends on the process" in sc10["message"]
    assert "(run it as PYTHONHASHSEED=1 python ...)" in sc10["reproduction"]
    # In-process, where every run shares one hash seed, nothing else sees it.
    assert check(zoo.HashOrderedShards, clauses=["SC10"], space=IN_PROCESS, isolation="in-process").passed


@HASH_ORDERED
def test_the_hash_seed_reproduction_fails_across_interpreters_and_passes_in_one(hash_ordered_sc10, tmp_path):
    _write_the_two_programs(hash_ordered_sc10["reproduction"], tmp_path)

    def python(file: str, seed: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(Path(zoo.__file__).parent), "PYTHONHASHSEED": seed}
        return subprocess.run([sys.executable, file], cwd=tmp_path, capture_output=True, text=True, env=env)

    assert python("first.py", "0").returncode == 0
    second_run = python("second.py", "1")
    assert second_run.returncode == 1 and "AssertionError" in second_run.stderr, second_run.stderr
    assert python("second.py", "0").returncode == 0, "with the first process's hash seed it resumes exactly"


def test_a_factory_another_interpreter_cannot_import_resumes_in_a_forked_process_and_says_so():
    def local_factory(config):  # a closure: pickle cannot name it in another interpreter
        return zoo.EpochLoader(config)

    result = check(local_factory, clauses=["SC10"], space=IN_PROCESS)["SC10"]
    assert result.status == "passed", result.message
    assert any("examples resumed again in a fresh process" in n for n in result.notes), result.notes
    forked = [n for n in result.notes if "forked from the checker" in n]
    assert forked and "cannot be named in another interpreter" in forked[0], result.notes


def test_the_new_interpreter_does_not_run_the_checkers_main_script_again(tmp_path):
    """multiprocessing's spawn would re-import ``__main__``: a script without a main guard would run twice."""
    script = tmp_path / "unguarded.py"
    script.write_text("import zoo\nfrom stateful_contract import ConfigSpace, check\nprint('script ran')\n"
                      "r = check(zoo.epoch_loader, clauses=['SC10'], space=ConfigSpace(num_workers=(0,)))\n"
                      "print('verdict', r.passed, [n for n in r['SC10'].notes if 'forked' in n])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(zoo.__file__).parent)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("script ran") == 1, done.stdout
    assert "verdict True []" in done.stdout, done.stdout


def test_another_hash_seed_differs_from_the_checkers():
    from stateful_contract.isolation.interpreter import another_hash_seed

    assert another_hash_seed("0") == "1"
    assert another_hash_seed("4294967295") == "0"
    assert another_hash_seed("random") == another_hash_seed("") == "1"  # random: any pinned seed differs


class CrashesInANewInterpreter(zoo.EpochLoader):
    """Correct everywhere but in SC10's new interpreter, where loading a state kills its process."""

    def load_state_dict(self, state_dict):
        from stateful_contract.isolation.interpreter import FRESH_INTERPRETER_ENV

        if os.environ.get(FRESH_INTERPRETER_ENV):
            os.kill(os.getpid(), signal.SIGSEGV)
        super().load_state_dict(state_dict)


def test_a_crash_in_the_new_interpreter_is_reported_with_its_signal_and_step():
    result = check(CrashesInANewInterpreter, clauses=["SC10"], space=IN_PROCESS)["SC10"]
    assert result.status == "failed", result.message
    assert "SIGSEGV" in result.message and "load_state_dict" in result.message, result.message


#: This test process's temporary directory, read on import: the loader's processes have one of their run's own
#: (docs/supervision.md, "What a check leaves on the machine"), removed before this test reads what they wrote.
_SHARED_TEMP = Path(tempfile.gettempdir())


def _parents_seen(checker: int) -> Path:
    """Where `RecordsItsParent` writes, one file per checker process (suites run side by side here)."""
    return _SHARED_TEMP / f"stateful-contract-fresh-parents-{checker}"


class RecordsItsParent(zoo.EpochLoader):
    """Correct; resumed in the new interpreter, it notes which process that interpreter's children come from."""

    def load_state_dict(self, state_dict):
        from stateful_contract.isolation.interpreter import FRESH_INTERPRETER_ENV

        if os.environ.get(FRESH_INTERPRETER_ENV):
            parent = psutil.Process(os.getppid())  # the interpreter it was forked from; its parent, the checker
            with _parents_seen(parent.ppid()).open("a", encoding="utf-8") as f:
                f.write(f"{parent.pid} {parent.ppid()}\n")
        super().load_state_dict(state_dict)


def test_every_check_of_a_process_resumes_in_children_of_one_new_interpreter():
    """Torch is imported once per checker process, not once per check (a test session runs hundreds)."""
    seen = _parents_seen(os.getpid())
    seen.unlink(missing_ok=True)
    try:
        for _ in range(2):
            report = check(RecordsItsParent, clauses=["SC10"], space=IN_PROCESS, jobs=1)
            assert report.passed and "a new interpreter" in " ".join(report["SC10"].notes), report["SC10"].notes
        parents = {tuple(line.split()) for line in seen.read_text(encoding="utf-8").splitlines()}
    finally:
        seen.unlink(missing_ok=True)
    assert len(parents) == 1, parents  # one interpreter, this process's
    (zygote, checker), = parents
    assert int(checker) == os.getpid() and int(zygote) != os.getpid()


def _interpreters_tagged(tag: str) -> list[int]:
    """The live zygotes (new interpreters started for SC10) carrying ``tag`` in their environment."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if (any("zygote_main" in part for part in p.info["cmdline"] or ()) and p.status() != psutil.STATUS_ZOMBIE
                    and p.environ().get("STATEFUL_CONTRACT_TEST_TAG") == tag):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


def test_a_check_with_parallel_jobs_resumes_in_a_new_interpreter_and_leaves_no_process_behind(monkeypatch):
    """The job that judges SC10 starts its own new interpreter; it ends with the job (a job's child is no
    descendant of this process once the job is gone, so it is found by a variable only this check's carry)."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("STATEFUL_CONTRACT_TEST_TAG", tag)  # inherited by the jobs, and so by their interpreters
    report = check(zoo.epoch_loader, clauses=["SC10", "SC11"], space=IN_PROCESS, jobs=2)
    assert report.passed and "a new interpreter" in " ".join(report["SC10"].notes), report["SC10"].notes
    assert any("2 parallel processes" in n for n in report.notes), report.notes
    deadline = time.monotonic() + 10  # the kernel kills a job's interpreter when the job ends (its death signal)
    while (left := _interpreters_tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, [psutil.Process(pid).cmdline() for pid in left if psutil.pid_exists(pid)]


def test_a_cli_target_given_as_a_file_path_is_rebuilt_in_the_new_interpreter_from_that_file(tmp_path):
    """``check path/to/file.py:factory`` loads a module no import finds by name; the new interpreter loads the file."""
    (tmp_path / "shards.py").write_text(
        "import zoo\n\n"
        "class HashOrdered(zoo.EpochLoader):\n"
        "    def batches(self, epoch):\n"
        "        return sorted(super().batches(epoch), key=lambda b: hash(f'shard-{b[0]:05d}.bin'))\n")
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(Path(zoo.__file__).parent)}
    done = subprocess.run([sys.executable, "-m", "stateful_contract", "check", "shards.py:HashOrdered", "--clause",
                           "SC10", "--quiet", "--json", "r.json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    sc10 = next(c for c in json.loads((tmp_path / "r.json").read_text())["clauses"] if c["id"] == "SC10")
    assert sc10["status"] == "failed" and "the stream itself depends on the process" in sc10["message"], done.stdout
