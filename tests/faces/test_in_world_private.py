"""The in-world mode's files: a private run directory without ``--dir``, and a manifest nothing is unpickled from.

Without ``--dir``, a name derived from the job and the port (as before) let another user of the host
create the directory first or plant a manifest that ``--phase resume`` unpickled.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from charged import communicate

from stateful_contract.config import LoaderConfig
from stateful_contract.faces.distributed import phases
from stateful_contract.isolation.ranks.in_world import private_dir
from stateful_contract.report.results import ClauseResult, Report
from stateful_contract.repro.steps import Position
from stateful_contract.search.plans import Checkpoint

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

#: One rank joining a gloo world of ``WORLD_SIZE`` without ``--dir``: prints the directory it was given.
JOIN = """
import os, stat, sys
import torch.distributed as dist
from stateful_contract.isolation.ranks.in_world import join
world = join(None, backend="gloo", timeout=60)
mode = stat.S_IMODE(os.stat(world.run_dir).st_mode)
print(world.run_dir, oct(mode))
dist.barrier()
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_without_dir_rank_0_makes_a_private_directory_no_job_can_name_and_every_rank_uses_it() -> None:
    port = str(_free_port())
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
           "TORCHELASTIC_RUN_ID": "job-4711", "SLURM_JOB_ID": "4711"}
    ranks = [subprocess.Popen([sys.executable, "-c", JOIN], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outputs = [communicate(rank, timeout=120, roots=lambda: [r.pid for r in ranks]) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], outputs
    (path, mode), (other, other_mode) = (out.split() for out, _ in outputs)
    try:
        assert path == other, "both ranks must use the one directory rank 0 made"
        assert mode == other_mode == oct(0o700)
        assert Path(path).parent == Path(tempfile.gettempdir())
        assert "4711" not in Path(path).name and port not in Path(path).name
    finally:
        for directory in {path, other}:
            subprocess.run(["rm", "-rf", directory], check=False)


def test_a_rank_on_another_host_makes_the_path_private_and_refuses_one_others_may_write(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "elsewhere" / "stateful-contract-world-x")
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(PermissionError, match="not this user's private directory"):
        private_dir(open_to_all)
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(PermissionError, match="not this user's private directory"):
        private_dir(link)


def test_the_manifest_is_json_and_its_examples_come_back_equal(tmp_path: Path) -> None:
    config, plan = LoaderConfig(dataset_size=12, batch_size=1), Checkpoint(Position(epoch=0, batches=1))
    executor = SimpleNamespace(ran=[("SC30", config, plan), ("SC30", config, plan)], world_size=2, target="t:f",
                               spec=SimpleNamespace(factory_import="t", alignment="window"))
    result = ClauseResult("passed", examples=1, id="SC30", name="every-rank-resumes", tier="distributed")
    phases.write_manifest(tmp_path, cast(Any, executor), Report(target="t:f", results=[result]))
    assert json.loads((tmp_path / phases.MANIFEST).read_text())["world_size"] == 2
    manifest = phases.read_manifest(tmp_path)
    assert manifest["examples"] == {"SC30": [(config, plan)]}
    assert manifest["alignment"] == "window" and manifest["factory_import"] == "t"


@pytest.mark.parametrize("world_size, resumed", [(2, ["SC30"]), (1, ["SC10"])])
def test_the_manifest_holds_only_the_examples_a_resume_launch_judges(tmp_path: Path, world_size: int,
                                                                      resumed: list[str]) -> None:
    # SC10 on several ranks has no fresh-process half (SC30 resumes there): a resume launch refuses its examples,
    # so the save neither writes them nor says they were saved. On one rank SC10 resumes, and SC30 is not run.
    config, plan = LoaderConfig(dataset_size=12, batch_size=1), Checkpoint(Position(epoch=0, batches=1))
    ran = [(cid, config, plan) for cid in ("SC10", "SC30") if world_size > 1 or cid == "SC10"]
    executor = SimpleNamespace(ran=ran, world_size=world_size, target="t:f",
                               spec=SimpleNamespace(factory_import="t", alignment="window"))
    results = [ClauseResult("passed", examples=1, id=cid, name=cid.lower(), tier="core") for cid, _, _ in ran]
    phases.write_manifest(tmp_path, cast(Any, executor), Report(target="t:f", results=results))
    assert sorted(phases.read_manifest(tmp_path)["examples"]) == resumed
    for result in results:
        said = [note for note in result.notes if "saved in" in note]
        assert said == ([f"1 example saved in {tmp_path} for the resume launch (--phase resume --dir)"]
                        if result.id in resumed else []), (result.id, result.notes)


class _Planted:
    """What another job could leave in a shared directory: unpickling it runs a command."""

    def __init__(self, witness: Path) -> None:
        self.witness = witness

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.witness}",))


def test_a_manifest_with_a_pickle_payload_is_refused_and_nothing_in_it_runs(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    (tmp_path / phases.MANIFEST).write_bytes(pickle.dumps({"examples": _Planted(witness)}))
    with pytest.raises(ValueError, match="is not a manifest the save launch wrote"):
        phases.read_manifest(tmp_path)
    assert not witness.exists()


def test_a_json_manifest_whose_example_calls_a_function_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    witness = tmp_path / "ran"
    planted = {"world_size": 2, "target": "t:f", "factory_import": "t", "alignment": None,
               "examples": {"SC30": [{"config": f"__import__('os').system('touch {witness}')", "plan": "None"}]}}
    (tmp_path / phases.MANIFEST).write_text(json.dumps(planted))
    with pytest.raises(ValueError, match="is not a manifest the save launch wrote"):
        phases.read_manifest(tmp_path)
    assert not witness.exists()
