"""Every command line the checker prints parses as the command it names parses it, and runs.

Rerun lines and hints are strings built in several places: a multi-rank reproduction's "the same example on
real ranks" (isolation/ranks/executor.py), a crash's rerun with ``--run-dir``, the in-world rerun under the
user's launcher (isolation/ranks/in_world.py), the Markdown summary's replay line (faces/export.py), and the
options a message names (`spellings.Hint`). Each is checked as a user uses it, pasted into a shell: split as
the shell splits it (`shlex`), parsed by its command's own argparse parser (torchrun's too), its option values
read as the command reads them (`CheckOptions`, ``--config``/``--position``), its target imported. The lines
are gathered from what the faces print for broken loaders (the text report, the JSON, JUnit and Markdown
outputs), and a few are run. Each rerun gives again every option of the check that changes what it judges
(`CheckOptions.carried`): read back from the line, they are the check's own.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch.distributed.run as torchrun
import zoo
import zoo_kills

from stateful_contract import CheckOptions, ConfigSpace, Report
from stateful_contract.faces import cli, export, flags, replay
from stateful_contract.faces.distributed import __main__ as distributed
from stateful_contract.faces.distributed import in_world
from stateful_contract.isolation.ranks import Ranks
from stateful_contract.isolation.ranks.in_world import OWN_WORLD, InWorld, launch_line
from stateful_contract.isolation.target import load_target
from stateful_contract.report.render import render_report
from stateful_contract.run.options import UnknownClauseWarning
from stateful_contract.spellings import NOT_CARRIED, OF_ITS_OWN_PROCESSES, OPTIONS, Hint, speaking

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parents[1]
RANKED = f"{TESTS / 'ranked_loaders.py'}:SkipsItsOwnCount"

#: A command line inside a line of text: a launcher's (its own flags, then the in-world command), the
#: distributed command, or the CLI's; up to a backtick, a quote that opened before it, or a "  # comment".
_COMMAND = re.compile(r"(?:(?:torchrun|srun|mpirun)\b[^`\n]*?-m stateful_contract\.distributed run\b"
                      r"|(?:python )?-m stateful_contract(?:\.distributed)?\b"
                      r"|stateful-contract (?:check|replay|badge|demo|clauses)\b)[^`\n]*")
#: A long flag inside prose.
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")


def commands_in(text: str) -> list[str]:
    """The command lines in ``text`` (a report, a hint), as a user would copy them."""
    found = []
    for match in _COMMAND.finditer(text):
        command = match.group(0).split("  #")[0].rstrip(" .;,)")
        if match.start() and text[match.start() - 1] in "'\"":  # quoted in prose: up to the closing quote
            command = command.split(text[match.start() - 1])[0]
        found.append(command)
    return found


@dataclass
class Parsed:
    """A printed command as its program read it: which program, its arguments."""

    program: str  # "check", "replay", ... for the CLI; "distributed"; "run" (in a launcher's world)
    args: argparse.Namespace
    launcher: list[str]


def _parsed_by(parser: argparse.ArgumentParser, words: list[str], command: str) -> argparse.Namespace:
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            return parser.parse_args(words)
    except SystemExit:
        raise AssertionError(f"{command!r} does not parse: {said.getvalue().strip()}") from None


def parse(command: str) -> Parsed:
    """``command`` split as a shell splits it and read by its program's parser, launcher included."""
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise AssertionError(f"{command!r} is no shell line: {e}") from None
    launcher: list[str] = []
    if words[0] == "torchrun":  # torchrun's own flags, as torchrun reads them ("..." stands for a node's own)
        at = words.index("-m")
        launcher = words[:at]
        _parsed_by(torchrun.get_args_parser(), [w for w in words[1:at] if w != "..."] + ["script.py"], command)
        words = ["python", *words[at:]]
    elif words[0] in ("srun", "mpirun"):
        at = words.index("python")
        launcher, words = words[:at], words[at:]
    if words[:3] == ["python", "-m", "stateful_contract"] or words[:2] == ["-m", "stateful_contract"]:
        words = ["stateful-contract", *words[words.index("stateful_contract") + 1:]]
    if words[0] == "stateful-contract":
        return Parsed(words[1], _parsed_by(cli._parser(), words[1:], command), launcher)
    module = words.index("stateful_contract.distributed") if "stateful_contract.distributed" in words else None
    assert module is not None and words[module - 1] == "-m", f"{command!r}: no command of this package"
    rest = words[module + 1:]
    if rest[:1] == ["run"]:
        return Parsed("run", _parsed_by(in_world._parser(), rest[1:], command), launcher)
    return Parsed("distributed", _parsed_by(distributed.parser(), rest, command), launcher)


def check_values(parsed: Parsed, command: str, cwd: Path) -> None:
    """What the program reads after its parser: the options as `CheckOptions`, the example, the target; for
    ``replay``, the report and the clause in it."""
    args = parsed.args
    if parsed.program == "replay":
        report = cwd / args.report
        assert report.is_file(), f"{command!r}: no report {report}"
        ids = [c["id"] for c in json.loads(report.read_text())["clauses"]]
        assert args.clause in ids, f"{command!r}: {args.clause} is not in the report ({ids})"
        return
    if parsed.program not in ("check", "distributed", "run"):
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnknownClauseWarning)
            # ``run`` takes its world size from the launcher's world: two ranks, as every launch line here
            given = flags.options_of(args)
            CheckOptions(**({**given, "world_size": 2} if parsed.program == "run" else given))
        replay.example_of(args)
    except Exception as e:
        raise AssertionError(f"{command!r}: its options do not read: {e}") from None
    with _in(cwd):
        try:
            load_target(args.target)
        except Exception as e:
            raise AssertionError(f"{command!r}: its target does not resolve: {e}") from None


@contextlib.contextmanager
def _in(directory: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def known_flags() -> set[str]:
    """Every long flag a reader of this package's messages can be sent to: the package's commands', torchrun's."""
    def of(parser: argparse.ArgumentParser) -> set[str]:
        found: set[str] = set()
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    found |= of(sub)
        return found

    return (of(cli._parser()) | of(in_world._parser()) | of(distributed.parser()) | of(torchrun.get_args_parser())
            | SRUN)


#: The flags of Slurm's ``srun`` a launch line names (``srun --ntasks 4 python``): no parser of it here.
SRUN = {"--ntasks"}


def assert_every_command_works(text: str, cwd: Path) -> list[Parsed]:
    """Each command line of ``text`` parses and reads; each flag it names exists. The parsed lines."""
    unknown = sorted(set(_FLAG.findall(text)) - known_flags())
    assert not unknown, f"flags no command of this package (nor torchrun) has: {unknown}\n{text}"
    parsed = []
    for command in commands_in(text):
        parsed.append(parse(command))
        check_values(parsed[-1], command, cwd)
    return parsed


# -- the checker itself -------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, why", [
    ("stateful-contract check zoo:epoch_loader --clause SC10 --timeout", "a flag without its value"),
    ("stateful-contract check zoo:epoch_loader --world-size N", "a value that does not parse"),
    ("stateful-contract check zoo:epoch_loader --no-such-flag", "a flag that does not exist"),
    ("python -m stateful_contract.distributed run zoo:epoch_loader --run-dir DIR", "a flag run does not take"),
    ("python -m stateful_contract.distributed zoo:epoch_loader --config \"LoaderConfig(dataset_size=2)", "quoting"),
    ("python -m stateful_contract.distributed zoo:epoch_loader --clause SC99", "an unknown clause"),
    ("python -m stateful_contract.distributed zoo:epoch_loader --config \"LoaderConfig(size=2)\" "
     "--position \"Position(epoch=0, batches=0)\"", "a config that does not read"),
    ("stateful-contract check zoo:no_such_factory", "a target that does not resolve"),
    ("torchrun --nproc_per_nod 2 -m stateful_contract.distributed run zoo:epoch_loader", "a launcher's typo"),
    ("stateful-contract replay REPORT.json SC10", "a report that is not there"),
])
def test_the_check_fails_a_line_that_would_not_run(command: str, why: str) -> None:
    with pytest.raises(AssertionError):
        assert_every_command_works(f"# {command}\n", TESTS)


def test_the_check_finds_the_lines_in_prose_and_reproductions() -> None:
    text = ("Reproduce:\n    # The same example on real ranks (fresh processes):\n"
            "    # python -m stateful_contract.distributed zoo:epoch_loader --world-size 2 --clause SC30\n"
            "Replay: `stateful-contract replay REPORT.json SC10` (config `LoaderConfig()`)\n"
            "run 'python -m stateful_contract.distributed TARGET --world-size N', which starts its own\n"
            "rerun: torchrun --nproc-per-node 2 -m stateful_contract.distributed run zoo:epoch_loader  # kept\n")
    assert commands_in(text) == [
        "python -m stateful_contract.distributed zoo:epoch_loader --world-size 2 --clause SC30",
        "stateful-contract replay REPORT.json SC10",
        "python -m stateful_contract.distributed TARGET --world-size N",
        "torchrun --nproc-per-node 2 -m stateful_contract.distributed run zoo:epoch_loader"]


# -- what the faces print -----------------------------------------------------------------------------------


def test_every_hint_spelled_for_the_command_line_parses_after_check(tmp_path: Path) -> None:
    """`spellings.Hint` spells each option for the CLI; appended to a check's line, each setting parses, and
    its value reads (the forms that only name an option name one that exists)."""
    values: dict[str, Any] = {
        "profile": "dev", "clauses": ("SC10", "SC11"), "expected_failures": {"SC20": "a fresh loader's only"},
        "checkpoint_alignment": "window", "epoch_hook": "reshuffle", "space": ("num_workers=0,2",),
        "consume": "zoo:epoch_loader", "strict": True, "endless": True, "world_size": 2,
        "fixed_global_batch": True, "joins_uneven_inputs": True, "checkpoint_layout": "per-rank-files",
        "trainer_shape": "loads-fresh",
        "timeout": 30, "run_timeout": 600, "run_dir": str(tmp_path), "memory_limit": "2G", "isolation": True,
        "jobs": 2, "exitfirst": True, "seed": 7}
    assert set(values) == set(OPTIONS), "a new option: give it a value here"
    with speaking("cli"):
        for option, value in values.items():
            for form in ("name", "remove"):  # prose: "drop --expect-fail SC20", "--timeout"
                assert set(_FLAG.findall(str(Hint(option, value, form=form)))) <= known_flags()
            setting = str(Hint(option, value))
            if setting == "/".join(OPTIONS[option].flags):  # "-x/--exitfirst": the flags named, as prose
                setting = OPTIONS[option].flag
            if option == "space":
                setting = f"{OPTIONS[option].flag} num_workers=0,2"
            assert_every_command_works(f"stateful-contract check zoo:epoch_loader {setting}", TESTS)


def _in_world(launch: str, carried: dict[str, list[str]] | None = None) -> InWorld:
    """An in-world executor as far as its rerun lines read it: no world is joined."""
    executor = object.__new__(InWorld)
    executor.target, executor.launch, executor.world_size, executor.carried = RANKED, launch, 4, carried or {}
    return executor


def test_the_in_world_rerun_lines_are_lines_each_launcher_and_run_accept() -> None:
    """`InWorld.rerun` on every launch line `launch_line` writes (torchrun on one node and on several, srun,
    mpirun, a script's own world), with an example's arguments."""
    example = ["--checkpoint-layout", "per-rank-files", "--config", "LoaderConfig(dataset_size=2, batch_size=1)",
               "--position", "Position(epoch=0, batches=1)"]
    envs = [{"TORCHELASTIC_RUN_ID": "1", "LOCAL_WORLD_SIZE": "2"},
            {"TORCHELASTIC_RUN_ID": "1", "GROUP_WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"},
            {}]
    lines = [_in_world(launch_line(env, 4)).rerun("SC30", example) for env in envs]
    for line in lines:
        (parsed,) = assert_every_command_works(line, TESTS)
        assert parsed.program == "run" and parsed.args.clauses == ["SC30"], line
        assert replay.example_of(parsed.args) is not None and parsed.args.checkpoint_layout == "per-rank-files"
    building = _in_world(launch_line(envs[0], 4)).rerun("", ["--dir", "DIR"])  # gone building the first loaders
    (parsed,) = assert_every_command_works(building, TESTS)
    assert not parsed.args.clauses and parsed.args.dir == "DIR", building
    own = _in_world(OWN_WORLD).rerun("SC30", example)
    argv = ast.literal_eval(own.partition("run_in_world(")[2].partition(")  #")[0])
    check_values(Parsed("run", _parsed_by(in_world._parser(), argv, own), []), own, TESTS)


#: A check's options, each set away from its default (`CheckOptions` values, as a face gives them).
EVERY_OPTION_SET: dict[str, Any] = {
    "profile": "dev", "clauses": ("SC30",), "expected_failures": {"SC20": "a fresh loader's only", "SC22": "lazy iter"},
    "checkpoint_alignment": 4, "epoch_hook": "reshuffle", "space": ConfigSpace.parse("num_workers=0,2 batch_size=2..3"),
    "consume": "zoo:epoch_loader", "strict": True, "endless": True, "world_size": 3, "fixed_global_batch": True,
    "joins_uneven_inputs": True, "checkpoint_layout": "per-rank-files", "trainer_shape": ("loads-fresh", "iter-then-next"),
    "timeout": 12.5, "run_timeout": 600, "run_dir": "/tmp/kept", "memory_limit": 3 << 30, "isolation": "in-process",
    "jobs": 2, "exitfirst": True, "seed": 7}


def _read_back(parsed: Parsed) -> CheckOptions:
    given = flags.options_of(parsed.args)
    return CheckOptions(**({**given, "world_size": 2} if parsed.program == "run" else given))


def test_every_rerun_line_gives_again_every_option_that_changes_what_is_judged() -> None:
    """`spellings.NOT_CARRIED` is the one list of the options a rerun leaves out; every other one set on the
    check, read back from the line each writer prints (the distributed command's, the in-world one under each
    launcher), is the check's own, and the options the line leaves out are those. A line without them
    judged under another profile, space, timeout or declaration than the run that printed it."""
    assert set(EVERY_OPTION_SET) == set(OPTIONS), "a new option: give it a value here"
    original = CheckOptions(**EVERY_OPTION_SET)
    carried = original.carried()
    assert set(carried) == set(OPTIONS) - set(NOT_CARRIED), carried
    ranks = object.__new__(Ranks)
    ranks.target, ranks.world_size, ranks.carried = RANKED, 3, carried
    lines = [ranks.rerun("SC30", ["--config", "LoaderConfig(dataset_size=2)", "--position", "Position(epoch=0)"]),
             ranks.rerun("", ["--run-dir", "DIR"])]
    for env in ({"TORCHELASTIC_RUN_ID": "1", "LOCAL_WORLD_SIZE": "3"}, {"SLURM_PROCID": "0", "SLURM_NTASKS": "3"}):
        lines.append(_in_world(launch_line(env, 3), carried).rerun("SC30"))
    for line in lines:
        (parsed,) = assert_every_command_works(line, TESTS)
        again = _read_back(parsed)
        taken = set(carried) - (set(OF_ITS_OWN_PROCESSES) if parsed.program == "run" else set())
        assert {name: getattr(again, name) for name in taken} == {name: getattr(original, name) for name in taken}, line
        assert again.carried().keys() == taken, line  # and nothing else: what it leaves out is left at its default


def test_a_replay_runs_under_the_options_its_report_recorded_and_an_older_report_under_its_fields() -> None:
    """``stateful-contract replay`` reads the report's options as a command line reads them; a report from before
    they were recorded (format 13) still replays under the trainer's shape it declared."""
    original = CheckOptions(**{**EVERY_OPTION_SET, "world_size": 1, "clauses": None})
    recorded = Report("zoo:OffByOneResume", [], profile="dev", options=original.carried())
    again = replay.options_of(recorded)
    assert again.carried() == original.carried(), again
    older = Report("zoo:OffByOneResume", [], profile="dev", checkpoint_alignment="window", strict=True,
                   trainer_shape=["loads-fresh"], endless="declared")
    assert replay.options_of(older).carried() == {
        "profile": ["--profile", "dev"], "checkpoint_alignment": ["--checkpoint-alignment", "window"],
        "strict": ["--strict"], "endless": ["--endless"], "trainer_shape": ["--trainer-shape", "loads-fresh"]}


#: The single-rank check's options (beside its clauses and declarations): none the default.
SINGLE_RANK_OPTIONS = ["--profile", "dev", "--seed", "1", "--timeout", "45", "--config-space", "num_workers=0",
                       "dataset_size=2..12", "--trainer-shape", "loads-fresh", "--memory-limit", "3G"]


@pytest.fixture(scope="module")
def single_rank(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A failing check on one rank through the CLI, with every output: what it printed and wrote."""
    out = tmp_path_factory.mktemp("single")
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said), _in(TESTS):
        code = cli.main(["check", "zoo:OffByOneResume", "--clause", "SC01,SC10,SC11", *SINGLE_RANK_OPTIONS,
                         "--expect-fail", "SC01=declared so that it passes unexpectedly",
                         "--json", str(out / "REPORT.json"), "--junit", str(out / "r.xml"),
                         "--markdown", str(out / "r.md")])
    assert code == 1, said.getvalue()
    text = "\n".join([said.getvalue(), *(json.dumps(v) for v in _strings(json.loads((out / "REPORT.json")
                                                                               .read_text()))),
                      (out / "r.xml").read_text(), (out / "r.md").read_text()])
    return text, out


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON document, unescaped: the reproductions, hints and notes as a reader sees them."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_what_the_cli_prints_for_a_broken_loader_parses_and_the_replay_line_runs(
        single_rank: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    text, out = single_rank
    parsed = assert_every_command_works(text.replace("\\n", "\n"), out)
    replays = [p for p in parsed if p.program == "replay"]
    assert replays, text  # the Markdown summary's, at least
    capsys.readouterr()
    with _in(TESTS):
        assert cli.main(["replay", str(out / replays[0].args.report), replays[0].args.clause]) == 1
    assert "replaying SC10 resume-continues-the-stream" in capsys.readouterr().out
    # under the options the check ran under (the replay's own report records them as the check's did)
    recorded = Report.from_json(out / replays[0].args.report)
    given = flags.options_of(cli._parser().parse_args(["check", "zoo:OffByOneResume", *SINGLE_RANK_OPTIONS]))
    assert recorded.options == {**CheckOptions(**given).carried(), **{"expected_failures": [
        "--expect-fail", "SC01=declared so that it passes unexpectedly"]}}, recorded.options
    with _in(TESTS):
        again = replay.replay(recorded, "SC10")
    assert again["SC10"].status == "failed" and again.options == recorded.options, again.options


#: The two-rank checks' options (beside the clause): none the default.
TWO_RANK_OPTIONS = ["--checkpoint-alignment", "epoch", "--profile", "dev", "--seed", "2", "--timeout", "60",
                    "--config-space", "num_workers=0", "--trainer-shape", "loads-fresh", "--memory-limit", "3G"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A failing check on two ranks through the distributed command, and a crash of a rank's first loader."""
    out = tmp_path_factory.mktemp("ranks")
    (out / "crashing.py").write_text("import os\nfrom zoo import EpochLoader\n\n\ndef factory(config):\n"
                                     "    if config.rank == 1:\n        os._exit(3)\n    return EpochLoader(config)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    texts = []
    for target, name in ((RANKED, "ranked"), ("crashing.py:factory", "crash")):
        done = subprocess.run([sys.executable, "-m", "stateful_contract.distributed", target, "--clause", "SC30",
                               *TWO_RANK_OPTIONS, "--quiet", "--json", f"{name}.json"],
                              cwd=out, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 1, done.stdout + done.stderr
        texts += [done.stdout, done.stderr, *_strings(json.loads((out / f"{name}.json").read_text()))]
    return "\n".join(texts), out


@pytest.mark.launcher  # three two-rank launches through the command line (a minute under load)
def test_what_the_distributed_command_prints_parses_and_its_rerun_line_runs(two_ranks: tuple[str, Path]) -> None:
    text, out = two_ranks
    parsed = assert_every_command_works(text, out)
    reruns = [p for p in parsed if p.program == "distributed"]
    assert any(p.args.config for p in reruns), text  # the same example on real ranks
    assert any(p.args.run_dir == "DIR" for p in reruns), text  # the crash's: keep the run's files
    # each under every option of the check that changes what is judged (the report records them)
    recorded = Report.from_json(out / "ranked.json").options
    assert recorded and set(recorded) >= {"checkpoint_alignment", "profile", "seed", "timeout", "space",
                                          "trainer_shape", "memory_limit"}, recorded
    assert all(_read_back(p).carried() == recorded for p in reruns), text
    example = next(c for c in commands_in(text) if "--config" in c)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([*shlex.split(example.replace("python", sys.executable, 1)), "--quiet", "--json",
                           "again.json"], cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "SC30 every-rank-resumes" in done.stdout, done.stdout + done.stderr
    again = Report.from_json(out / "again.json")  # the same verdict, under the same options
    assert again["SC30"].status == "failed" and again.options == recorded, again.options


@pytest.mark.parametrize("loader", [pytest.param(loader, marks=zoo_kills.group(loader)) for loader in zoo.KILLS])
def test_what_every_zoo_kill_prints_parses(tmp_path_factory: pytest.TempPathFactory, loader: type) -> None:
    """Each broken loader of the zoo, as every face shows its failure (the text report, JUnit, Markdown, JSON):
    the search the clause tests run once a session (`zoo_kills.killed`), read again."""
    report = zoo_kills.killed(tmp_path_factory, loader)
    text = io.StringIO()
    render_report(report, text)
    out = tmp_path_factory.mktemp("zoo")
    (out / "REPORT.json").write_text(report.to_json())
    assert_every_command_works("\n".join([text.getvalue(), export.junit_xml(report), export.markdown_summary(report),
                                          *_strings(json.loads(report.to_json()))]), out)



@pytest.mark.parametrize("clauses", [("SC10",), ("SC10", "SC11")])
def test_the_pytest_spelling_of_a_clause_selection_selects_those_tests(pytester: pytest.Pytester,
                                                                      clauses: tuple[str, ...]) -> None:
    """Under pytest a message names clauses as ``-k`` selects them: pasted after ``pytest``, it selects their
    tests and no other."""
    pytester.makepyfile(test_loader=textwrap.dedent("""
        from stateful_contract.testing import StatefulLoaderContract

        class TestLoader(StatefulLoaderContract):
            def make_loader(self, config):
                return config.stateful_dataloader()
    """))
    with speaking("pytest", "TestLoader"):
        hint = str(Hint("clauses", clauses))
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider", *shlex.split(hint))
    chosen = [line.partition("[")[2].partition("-")[0] for line in result.stdout.lines if "::test_clause[" in line]
    assert chosen == list(clauses), (hint, result.stdout.str())
