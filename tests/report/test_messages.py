"""Messages read once, by someone who never read this code.

One vocabulary for points in a run; hints matched on the failing example, whichever
clause shows it; each face's own spelling of every hint; links a pip user can open;
and no noise: torchdata's ``set_vital`` warning, per-clause lines in a log, cut reasons.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import shlex
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import zoo

from stateful_contract import CheckOptions, ConfigSpace, LoaderConfig, check
from stateful_contract.faces.cli import main
from stateful_contract.faces.live import Live
from stateful_contract.faces.replay import parse_value
from stateful_contract.faces.testing import StatefulLoaderContract
from stateful_contract.isolation.noise import ignore_set_vital
from stateful_contract.links import DOCS
from stateful_contract.repro.epoch_compare import lost_epoch
from stateful_contract.repro.epoch_steps import LoopPoint
from stateful_contract.repro.steps import Position
from stateful_contract.run.clause_loop import Progress
from stateful_contract.search.example import GENERATOR_ITER
from stateful_contract.search.plans import Checkpoint
from stateful_contract.spellings import OPTIONS, Hint, speaking

ROOT = Path(__file__).resolve().parents[2]
IN_PROCESS = ConfigSpace(num_workers=(0,))

# -- one vocabulary -----------------------------------------------------------------------------

LENGTHS = [3, 3, 3, 3]
#: One point of every kind, as a Position and as the epoch loop's LoopPoint.
POINTS = {
    "before iter()": (Position(before_iter=True), LoopPoint(1, before_iter=True)),
    "after iter()": (Position(1, 0), LoopPoint(1, 0)),
    "mid-epoch": (Position(0, 2), LoopPoint(1, 2)),
    "after the last batch": (Position(0, 3), LoopPoint(1, 3)),
    "after StopIteration": (Position(0, 3, after_stop=True), LoopPoint(1, 3, after_stop=True)),
}


@pytest.mark.parametrize("which", [0, 1], ids=["Position", "LoopPoint"])
def test_every_kind_of_point_describes_itself_unambiguously_and_round_trips_through_its_code(which: int) -> None:
    described = {}
    for kind, points in POINTS.items():
        point = points[which]
        words = point.describe(LENGTHS) if which == 0 else point.describe(LENGTHS[point.epoch])
        # Epochs are numbered from 0 and named; a point says whether iter() was called.
        assert f"epoch {point.epoch}" in words, words
        assert "iter()" in words or "batches of epoch" in words or "StopIteration" in words, words
        assert "0 batches" not in words and "pass 1" not in words, words
        assert parse_value(point.as_code()) == point, point.as_code()
        described[kind] = words
    assert len(set(described.values())) == len(POINTS), described
    assert "StopIteration" in described["after StopIteration"] and "StopIteration" in described["after the last batch"]
    assert described["after the last batch"] != described["after StopIteration"]
    assert "before its first batch" in described["after iter()"]


def test_a_position_names_its_kind_and_says_less_only_where_the_epoch_length_is_unknown() -> None:
    for kind, (position, _) in POINTS.items():
        assert position.kind(LENGTHS) == kind
    # Without the lengths, the last batch is not told from the middle: the words stay true.
    assert Position(0, 3).describe() == "after 3 batches of epoch 0 (its iterator open)"
    assert Position(0, 3).describe(LENGTHS).startswith("after the last batch of epoch 0")


def test_an_epoch_lost_names_the_pass_from_0_with_its_iter_call_and_the_epoch_a_trainer_loses() -> None:
    said = lost_epoch([1, 1, 1, 1], Position(0, 1, after_stop=True), [0, 1, 1])
    assert said is not None
    assert "pass 0 (its first iter())" in said and "epoch 1 empty" in said, said
    said = lost_epoch([1, 1, 1, 1], Position(0, 1), [0, 0, 1])  # the first empty pass is torchdata's own
    assert said is not None and "pass 1 (its second iter())" in said and "epoch 1 empty" in said, said


# -- the generator hint, for any clause ---------------------------------------------------------


class _Hands:
    def __init__(self, config: LoaderConfig) -> None:
        # A base whose state after StopIteration still points at the finished epoch: one that
        # only a state taken after the next iter() gets right.
        self.base = zoo.StopIterationStateStillFinishing(config)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state)


class GeneratorWrapper(_Hands):
    """The wrapper most people write: nothing in ``__iter__`` runs before the first ``next()``."""

    def __iter__(self) -> Any:
        yield from self.base


class EagerWrapper(_Hands):
    def __iter__(self) -> Any:
        it = iter(self.base)
        return (batch for batch in it)


TWO = LoaderConfig(dataset_size=2, batch_size=1)


def _sc10(factory: Any, position: Position) -> Any:
    return check(factory, clauses=["SC10"], space=IN_PROCESS, replay=(TWO, Checkpoint(position)))["SC10"]


def test_a_generator_iter_failing_sc10_right_after_iter_is_told_why_and_how_to_fix_it() -> None:
    lazy = _sc10(GeneratorWrapper, Position(1, 0))
    assert lazy.status == "failed", lazy.message
    assert "epoch lost" in lazy.got and "after iter() of epoch 1, before its first batch" in lazy.context
    assert GENERATOR_ITER in lazy.got and "it = iter(self.base)" in lazy.message
    assert DOCS + "/clauses.md#sc22-cut-short-passes-resume" in lazy.message
    # The fix the hint shows: the same point resumes exactly once the base's pass starts in __iter__.
    assert _sc10(EagerWrapper, Position(1, 0)).status == "passed"
    # Elsewhere the hint would name a cause it did not see: past StopIteration no iter() was made.
    past = _sc10(GeneratorWrapper, Position(0, 2, after_stop=True))
    assert past.status == "failed" and "generator function" not in past.message, past.message


def test_a_state_inside_a_grad_acc_window_is_told_about_the_window_declaration() -> None:
    config = LoaderConfig(dataset_size=4, batch_size=1, grad_acc_step=2)
    inside = check(zoo.OffByOneResume, clauses=["SC10"], space=IN_PROCESS,
                   replay=(config, Checkpoint(Position(0, 1))))["SC10"]
    assert inside.status == "failed"
    assert "inside a grad-acc window (after 1 of its 2 batches)" in inside.got, inside.got
    assert 'checkpoint_alignment="window"' in inside.got  # from Python, Python's spelling
    boundary = check(zoo.OffByOneResume, clauses=["SC10"], space=IN_PROCESS,
                     replay=(config, Checkpoint(Position(0, 2))))["SC10"]
    assert boundary.status == "failed" and "grad-acc window" not in boundary.got


# -- each face's own form -----------------------------------------------------------------------

HINTS = [Hint("expected_failures", {"SC23": "torchdata F13"}), Hint("expected_failures", "SC17", form="remove"),
         Hint("checkpoint_alignment", "window"), Hint("checkpoint_alignment", 4), Hint("clauses", ("SC10",)),
         Hint("clauses", ("SC10", "SC13")), Hint("strict", True), Hint("world_size", 2), Hint("epoch_hook", "NAME"),
         Hint("joins_uneven_inputs", True), Hint("checkpoint_layout", "per-rank-files")]


def check_keywords() -> set[str]:
    """What `check` accepts by name: its own parameters and every field of `CheckOptions`."""
    return set(inspect.signature(check).parameters) | {f.name for f in dataclasses.fields(CheckOptions)}


@pytest.mark.parametrize("hint", HINTS, ids=repr)
def test_each_hint_is_a_real_option_of_each_face(hint: Hint, cli_options: Any) -> None:
    cli = hint.spelled("cli")
    if not cli.startswith("drop "):  # the others are options `check` accepts as written
        cli_options("pkg:factory", *shlex.split(cli))
    python = hint.spelled("python")
    if python.startswith("check("):
        call = ast.parse(python.replace("...", "target"), mode="eval").body
        assert isinstance(call, ast.Call)
        assert {k.arg for k in call.keywords} <= check_keywords(), python
    with speaking("pytest", "TestMyLoader"):
        under_pytest = str(hint)
    named = re.findall(r"\b([a-z_]+) = ", under_pytest) + re.findall(r"TestMyLoader\.([a-z_]+)", under_pytest)
    assert all(hasattr(StatefulLoaderContract, n) for n in named), under_pytest
    assert named or under_pytest.startswith("-k "), under_pytest
    assert len({cli, python, under_pytest}) == 3


@pytest.mark.parametrize("hint", [Hint("timeout"), Hint("memory_limit")], ids=["timeout", "memory-limit"])
def test_each_limit_a_message_names_is_an_option_of_each_face(hint: Hint, cli_options: Any) -> None:
    """The engine's messages name a limit without its value ("--timeout sets the limit"): each spelling is one."""
    cli_options("pkg:factory", hint.spelled("cli"), "1")
    call = ast.parse(hint.spelled("python").replace("...", "target"), mode="eval").body
    assert isinstance(call, ast.Call) and {k.arg for k in call.keywords} <= check_keywords()
    with speaking("pytest", "TestMyLoader"):
        attribute = re.fullmatch(r"([a-z_]+) = \.\.\. on TestMyLoader", str(hint))
    assert attribute is not None and hasattr(StatefulLoaderContract, attribute.group(1))


def test_the_command_line_is_built_from_the_one_table_of_spellings(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Each option of the table is a `check` keyword, a flag of ``check`` with the table's help (as
    ``check --help`` shows them), and (but the clauses, selected with ``-k``, the seed,
    ``--stateful-contract-seed``, the consumption, a method ``consume`` the class defines, and a multi-rank
    run's bound and kept files, a command line's) an attribute of the mixin."""
    monkeypatch.setenv("COLUMNS", "10000")  # argparse wraps at the terminal's width, breaking hyphenated words
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    helps: dict[str, str] = {}  # "-x, --exitfirst" -> its help, read off "  -x, --exitfirst  HELP"
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("  -"):  # the flags, each with its metavar; the help after two spaces or on the next line
            invocation, _, help_text = line.strip().partition("  ")
            flags = ", ".join(part.split(" ")[0] for part in invocation.split(", "))
            helps[flags] = help_text.strip()
        elif line.startswith("      ") and helps and not helps[flags]:
            helps[flags] = line.strip()
    for keyword, option in OPTIONS.items():
        assert keyword in check_keywords(), keyword
        as_shown = re.escape(option.help.replace("%%", "%")).replace(re.escape("%(default)s"), r"\S+")
        assert re.fullmatch(as_shown, helps[", ".join(option.flags)]), keyword
        with speaking("pytest", "TestMyLoader"):
            attribute = str(Hint(keyword, form="name")).removeprefix("TestMyLoader.")
        assert keyword in ("clauses", "seed", "consume") or hasattr(StatefulLoaderContract, attribute), keyword
    with pytest.raises(ValueError, match="no option"):
        Hint("time_out")


def test_the_distributed_commands_spell_their_hints_as_a_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from stateful_contract.faces.distributed import __main__ as distributed_main
    from stateful_contract.faces.distributed import in_world

    said: list[str] = []
    for face in (distributed_main, in_world):
        # in_world's _main also takes whether it runs in a process of its own (the workspace change): any arguments.
        monkeypatch.setattr(face, "_main", lambda *args: said.append(str(Hint("timeout"))) or 0)
        assert face.main([]) == 0
    assert said == ["--timeout", "--timeout"] and str(Hint("timeout")) == "check(..., timeout=...)"


def test_a_stale_declaration_says_how_to_remove_it_in_the_words_of_the_face_it_ran_from(capsys: Any) -> None:
    def stale() -> str:
        return check(zoo.epoch_loader, clauses=["SC12"], space=IN_PROCESS, profile="dev",
                     expected_failures={"SC12": "stale"})["SC12"].message

    assert "remove 'SC12' from expected_failures" in stale()
    with speaking("pytest", "TestMyLoader"):
        assert "remove 'SC12' from TestMyLoader.expected_failures" in stale()
    assert main(["check", "zoo:epoch_loader", "--clause", "SC12", "--expect-fail", "SC12=stale", "--profile", "dev",
                 "--quiet"]) == 1
    assert "drop --expect-fail SC12" in capsys.readouterr().out


# -- links a pip user can open ------------------------------------------------------------------


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    ids = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):  # the slugs mkdocs and GitHub give
        ids.add(re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-"))
    return ids


def test_messages_link_pages_and_anchors_of_the_published_docs_that_exist() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # tomllib is Python 3.11 on
    assert f'Documentation = "{DOCS}"' in pyproject.split("[project.urls]", 1)[1].split("\n[", 1)[0]
    cited = re.findall(r"""\bdoc\(\s*["']([\w.-]+)["'](?:,\s*["']([\w-]*)["'])?""",
                       "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "stateful_contract").rglob("*.py")))
    assert len(cited) >= 3, "the scan finds the citations"
    for page, anchor in cited:
        path = ROOT / "docs" / page
        assert path.is_file(), page
        assert not anchor or anchor in _anchors(path), (page, anchor)


# -- no noise -----------------------------------------------------------------------------------


def test_only_torchdatas_set_vital_warning_is_filtered() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ignore_set_vital()
        LoaderConfig(dataset_size=2).stateful_dataloader()  # torchdata 0.11 on torch 2.13 warns here
        warnings.warn_explicit("'set_vital' is deprecated, please do not call", UserWarning, "mine.py", 1,
                               module="mine")  # the same words from the loader's own code
        warnings.warn_explicit("something else", UserWarning, "sd.py", 1, module="torchdata.stateful_dataloader")
    assert [str(w.message) for w in caught] == ["'set_vital' is deprecated, please do not call", "something else"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream", [io.StringIO, _Terminal], ids=["a log", "a terminal"])
def test_progress_is_live_on_a_terminal_and_a_line_per_clause_in_a_log(stream: type[io.StringIO],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    err = stream()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["check", "zoo:OffByOneResume", "--clause", "SC01", "--clause", "SC10", "--profile", "dev",
                 "--seed", "1"]) == 1
    if err.isatty():
        assert "running SC10 resume-continues-the-stream: example " in err.getvalue(), err.getvalue()
        assert "checked" not in err.getvalue()
    else:  # each clause as it was judged, SC10's prerequisite too; the summary leaves that one out of its count
        lines = err.getvalue().splitlines()
        assert [line.split()[:3] for line in lines[:-1]] == [["SC01", "implements-protocol", "passed"],
                                                             ["SC18", "same-config-same-stream", "passed"],
                                                             ["SC10", "resume-continues-the-stream", "FAILED"]], lines
        assert all(re.search(r" \d+\.\d\d s$", line) for line in lines[:-1]), lines
        assert re.fullmatch(r"  checked 2 clauses in \d+\.\d s: 1 passed, 1 FAILED \(after 1 prerequisite, "
                            r"which held\)", lines[-1]), lines


def test_quiet_shows_no_progress(capfd: Any) -> None:
    assert main(["check", "zoo:OffByOneResume", "--clause", "SC01", "--profile", "dev", "--quiet"]) == 0
    out, err = capfd.readouterr()
    assert err == "" and "Verdict: PASS" in out, err




def test_a_log_silent_for_a_heartbeat_is_told_what_still_runs() -> None:
    """A clause that runs for minutes (two ranks, the thorough profile) is not mistaken for a hang, by its
    reader or by a CI system that ends jobs silent for 10 minutes."""
    said: list[str] = []
    live = Live(say=said.append, heartbeat=0.3)
    live(Progress("SC10", "resume-continues-the-stream", 0, 1))
    live(Progress("SC10", "resume-continues-the-stream", 3, 40))
    time.sleep(1.0)
    live(Progress("SC10", "resume-continues-the-stream", 1, 1, "passed", 1.0))
    live.stop()
    time.sleep(0.5)
    beats = [line for line in said if "still running" in line]
    assert beats and all(re.fullmatch(r"  \.\.\. still running: SC10 for \d+ s \(example 4 of 40\) \(\d+ s since "
                                      r"the check began\)", line) for line in beats), said
    assert len(beats) <= 3 and said[-1].split()[:3] == ["SC10", "resume-continues-the-stream", "passed"], said
    assert live.stopped.is_set()  # and no line after the stop: the report follows
    assert len(said) == len(beats) + 1, said


@pytest.mark.parametrize("command", [["check", "zoo:OffByOneResume", "--clause", "SC10"], ["demo"]],
                         ids=["check", "demo"])
def test_a_check_that_raises_leaves_no_heartbeat_behind(monkeypatch: pytest.MonkeyPatch, capfd: Any,
                                                         command: list[str]) -> None:
    """A check that raises mid-run (here, after its first clause began) takes its heartbeat down with it: a
    thread left beating would print "still running" into whatever the process does next (the rest of a pytest
    session, a script that called the command line)."""
    from stateful_contract.faces import cli, live

    monkeypatch.setattr(live, "Live", lambda *args, **kwargs: Live(*args, **{**kwargs, "heartbeat": 0.05}))

    def raising(*args: Any, progress: Live, **kwargs: Any) -> None:
        progress(Progress("SC10", "resume-continues-the-stream", 0, 40))
        waited = time.monotonic() + 30
        while progress.said == progress.started and time.monotonic() < waited:  # until it has beaten once
            time.sleep(0.01)
        raise RuntimeError("a bug in the engine")

    monkeypatch.setattr(cli, "check", raising)
    with pytest.raises(RuntimeError, match="a bug in the engine"):
        main(command)
    beating = [t for t in threading.enumerate() if t.name == "stateful-contract-heartbeat"]
    for thread in beating:
        thread.join(timeout=1.0)
    assert not any(t.is_alive() for t in beating), "the heartbeat's thread outlived the check that raised"
    said_before = capfd.readouterr().err
    assert "still running: SC10" in said_before, said_before  # it did beat while the check ran
    time.sleep(0.3)
    assert "still running" not in capfd.readouterr().err


def test_a_log_shows_no_set_vital_warning(capfd: Any) -> None:
    # SC10 passes on torchdata's loader, so its fresh-process half runs in a new interpreter too,
    # which has none of the checker's warning filters (the place the warning came from).
    assert main(["check", "stateful_contract.reference.factories:stateful_dataloader", "--clause", "SC10",
                 "--profile", "dev", "--seed", "1"]) == 0
    out, err = capfd.readouterr()
    assert "set_vital" not in out + err and "running SC" not in err, err
    assert err.splitlines()[-1].startswith("  checked 1 clause") and "Verdict: PASS" in out, err


def test_reasons_cut_in_the_table_are_shown_in_full_with_verbose(capsys: Any) -> None:
    args = ["check", "stateful_contract.reference.factories:mindspeed_wrapper", "--clause", "SC21", "--quiet",
            "--profile", "dev"]
    main(args)
    out = capsys.readouterr().out
    assert "1 reason in the table is cut at '...': -v prints them in full" in out
    main([*args, "-v"])
    out = capsys.readouterr().out
    full = out.split("Reasons in full:\n", 1)[1]
    assert "SC21 not judged: MindSpeedPrefetchGradAccDataLoader has no set_epoch" in full
    assert "(SC10 judges its epochs)" in full  # the end the table cut off


class _UpstreamSampler:
    """As a sampler upstream divides the dataset by micro-batch x ranks: a config smaller than that has no batch."""

    def __init__(self, samples: int, micro_batch: int, ranks: int = 2) -> None:
        self.samples, self.micro_batch, self.ranks = samples, micro_batch, ranks

    def steps(self) -> int:
        per_rank = self.samples // (self.micro_batch * self.ranks)
        return self.samples // per_rank  # ZeroDivisionError below micro-batch x ranks


def _divides_by_micro_batch_times_ranks(config: LoaderConfig) -> Any:
    _UpstreamSampler(config.dataset_size, config.batch_size).steps()
    return config.stateful_dataloader()


def test_a_factory_that_raises_is_reported_as_its_exception_not_as_two_fresh_loaders_differing() -> None:
    """Issue 31: on configs smaller than micro-batch x ranks an upstream sampler raises ZeroDivisionError; SC18
    reports that exception where it was raised, and the clauses that need SC18 say so, not that two fresh
    loaders from one config differ (they never got as far as a stream)."""
    report = check(_divides_by_micro_batch_times_ranks, space=IN_PROCESS, profile="dev")
    sc18 = report["SC18"]
    assert sc18.status == "failed", sc18.message
    assert "raised ZeroDivisionError" in sc18.got
    frame = f"test_messages.py:{inspect.getsourcelines(_UpstreamSampler.steps)[1] + 2} in steps)"
    assert frame in sc18.got, sc18.got  # the traceback's last frame: where it was raised
    blocked = [r for r in report.results if r.status == "not-judged" and "SC18" in r.message]
    assert len(blocked) >= 10, [(r.id, r.status, r.message) for r in report.results]
    for r in blocked:
        assert "two fresh loaders" not in r.message, r.message
        assert r.message.startswith("SC18 could not be judged: factory(config) raised ZeroDivisionError"), r.message
        assert frame in r.message, r.message


def test_a_genuine_sc18_failure_still_blocks_with_its_reason() -> None:
    """The clauses that need SC18 keep its own reason when SC18 judged and found two fresh loaders differing."""
    report = check(zoo.UnseededShuffle, space=IN_PROCESS, profile="dev", clauses=["SC18", "SC10"])
    assert report["SC18"].status == "failed"
    assert "two fresh loaders from one config differ" in report["SC10"].message, report["SC10"].message


def test_the_generator_hint_rests_on_what_the_contract_saw() -> None:
    """Issue 31: a hint names what was observed. The generator hint is given only where a fresh loader, driven
    to the same iter(), has the same state right before and right after it (the new pass had not started)."""
    from stateful_contract.repro.recording import Program
    from stateful_contract.search.example import Example, _iter_leaves_the_state

    def seen(factory: Any) -> bool:
        example = Example(factory, TWO, Program("tests"))
        return _iter_leaves_the_state(example, Checkpoint(Position(1, 0)), Position(1, 0), timeout=30)

    with warnings.catch_warnings():
        ignore_set_vital()
        assert seen(GeneratorWrapper) and not seen(EagerWrapper)
    lazy = _sc10(GeneratorWrapper, Position(1, 0))
    assert "observed on a fresh loader driven to the same point" in lazy.got, lazy.got
