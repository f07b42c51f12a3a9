"""``python -m stateful_contract.distributed``: the CLI's ``check`` on two ranks, and the line a failure prints.

Its flags are ``stateful-contract check``'s, from the one table (`spellings.OPTIONS`); ``run`` (inside a
launcher's world, tests/faces/test_in_world.py) takes the same spelling of those it shares. A line printed
by an earlier version keeps working: a user pastes it from an old report.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from charged import run as run_charged

from stateful_contract import CheckOptions
from stateful_contract.faces import flags
from stateful_contract.faces.cli import add_check_arguments
from stateful_contract.faces.distributed.__main__ import main
from stateful_contract.spellings import OPTIONS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

#: Every rank keeps its state under the key rank 0 saves too, so DCP gives rank 1 rank 0's (torchtitan#291).
RANK_BLIND = f"{Path(__file__).resolve().parents[1] / 'museum' / 'ranked.py'}:torchtitan_291"
#: The rerun line as this package printed it before the distributed command became the CLI's check.
PRINTED = ("python -m stateful_contract.distributed {target} --world-size 2 --clause SC30 "
           "--config \"LoaderConfig(dataset_size=2, batch_size=1)\" --position \"Position(epoch=0, batches=0)\"")


def _actions(parser: argparse.ArgumentParser) -> dict[str, tuple[list[str], Any, str | None]]:
    return {a.option_strings[-1]: (a.option_strings, a.default, a.help) for a in parser._actions if a.option_strings}


def test_the_command_takes_every_flag_of_check_as_check_spells_it_with_two_ranks(capsys: Any) -> None:
    check = argparse.ArgumentParser()
    add_check_arguments(check)
    with pytest.raises(SystemExit):
        main(["--help"])
    told = " ".join(capsys.readouterr().out.split())
    for flag, (spellings, _, help_text) in _actions(check).items():
        assert ", ".join(spellings) in told, flag
        assert help_text is None or "%(" in help_text or " ".join(help_text.split()) in told, flag
    assert OPTIONS["world_size"].help in told and OPTIONS["run_dir"].help in told


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
def test_a_printed_rerun_line_of_an_earlier_version_fails_again_when_pasted(capsys: Any) -> None:
    line = PRINTED.format(target=RANK_BLIND)
    assert main([*shlex.split(line)[3:], "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "SC30 every-rank-resumes" in out and "DCP gave it values saved by rank 0" in out, out


@pytest.mark.parametrize(("argv", "said"), [
    (["--config", "LoaderConfig(dataset_size=2, batch_size=1)"], "--config and --position go together"),
    (["--config", "__import__('os').system('true')", "--position", "Position(epoch=0, batches=0)"],
     "is neither a literal nor a known dataclass"),
    (["--config", "Position(epoch=0, batches=0)", "--position", "Position(epoch=0, batches=0)"],
     "cannot read"),
    (["--clause", "SC99"], "--clause names an unknown clause"),
])
def test_a_wrong_example_or_clause_is_a_usage_error_before_any_rank_starts(argv: list[str], said: str,
                                                                           capsys: Any) -> None:
    assert main([RANK_BLIND, *argv]) == 2
    assert said in capsys.readouterr().err


def test_without_clause_or_world_size_it_is_sc30_on_two_ranks() -> None:
    """The defaults the command always had (`flags.options_of` what argparse read, as the command runs it)."""
    parser = argparse.ArgumentParser()
    add_check_arguments(parser, world_size=2)
    options = CheckOptions(**flags.options_of(parser.parse_args([RANK_BLIND, "--clause", "SC30,SC31"])))
    assert options.world_size == 2 and options.clauses == ("SC30", "SC31")


def test_in_world_run_reads_the_flags_it_shares_with_check_as_check_does() -> None:
    from stateful_contract.faces.distributed import in_world

    shared = _actions(in_world._parser())
    check = argparse.ArgumentParser()
    add_check_arguments(check)
    for flag, action in _actions(check).items():
        if flag in shared:
            assert shared[flag] == action, flag
    assert {"--profile", "--clause", "--timeout", "--config", "--position", "--checkpoint-layout", "--config-space",
            "--consume", "--strict"} <= set(shared)
    args = in_world._parser().parse_args(["pkg:factory", "--clause", "SC30,every-rank-resumes", "--clause", "SC31"])
    assert set(CheckOptions(**flags.options_of(args), world_size=2).clauses or ()) == {"SC30", "SC31"}


def test_in_world_an_unknown_clause_is_a_usage_error_spelled_as_its_flag(tmp_path: Path) -> None:
    """A world of one rank (the launcher's variables set by hand): rank 0 refuses the option, and exits 2."""
    import os
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port)}
    done = run_charged([sys.executable, "-m", "stateful_contract.distributed", "run",
                        "stateful_contract.reference.factories:reference_wrapper", "--clause", "SC30,SC99"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "stateful_contract.distributed run: --clause names an unknown clause 'SC99'" in done.stderr, done.stderr


@pytest.mark.parametrize(("run", "argv", "said"), [
    (False, [RANK_BLIND, "--world-size"], "python -m stateful_contract.distributed: argument --world-size"),
    (True, ["pkg:factory", "--phase", "save"], "python -m stateful_contract.distributed run: --phase save needs --dir"),
])
def test_a_usage_error_of_either_command_is_one_line_as_checks_is(run: bool, argv: list[str], said: str,
                                                                  capsys: Any) -> None:
    """As ``stateful-contract check`` says it (`cli.Parser`): the problem and where help is, not the whole usage."""
    from stateful_contract.faces.distributed import in_world

    with pytest.raises(SystemExit) as ended:
        (in_world.main if run else main)(argv)
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith(said) and err.count("\n") == 1, err
    assert err.rstrip().endswith("--help)"), err


def test_in_world_run_outside_any_launchers_world_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: Any) -> None:
    from stateful_contract.faces.distributed import in_world

    for name in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert in_world.main(["pkg:factory"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stateful_contract.distributed run: no launcher's world here") and err.count("\n") == 1, err
    assert "start it with torchrun, srun or mpirun" in err and "--world-size N" in err, err
