"""A check leaves the machine as it found it: what the processes it kills held in TMPDIR and /dev/shm is gone.

SIGKILL runs no finalizer: a killed DataLoader worker's ``pymp-*`` directory stayed in TMPDIR, and the named
semaphores (``spawn``) and ``file_system`` tensors whose owners (the resource tracker, ``torch_shm_manager``)
died in the same sweep stayed in /dev/shm. A CI runner checking every push collected them without bound (753
``pymp-*`` directories and 426 semaphores on this project's own machine). Each kind of run is counted here in
a TMPDIR of its own (docs/supervision.md, "What a check leaves on the machine", has the table before and after).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from leftover_loaders import RECORD_ENV

from stateful_contract.isolation.leftovers import SHARED_MEMORY, private_tmpdir
from stateful_contract.isolation.processes import kill_session

LOADERS = str(Path(__file__).parents[1] / "leftover_loaders.py")
REFERENCE = "stateful_contract.reference.factories"

#: A process in a session of its own that maps three things and sleeps: a named (``spawn``) semaphore and a
#: ``file_system`` tensor of its own, and a semaphore it shares with a process it forked into another session.
_HOLDER = """
import json, os, sys, time, multiprocessing
import torch, torch.multiprocessing
torch.multiprocessing.set_sharing_strategy("file_system")
shared = multiprocessing.get_context("spawn").Lock()
ready, told = os.pipe()
other = os.fork()
if other == 0:
    os.setsid(); os.write(told, b"x"); time.sleep(600); os._exit(0)
os.read(ready, 1)
own = multiprocessing.get_context("spawn").Lock()
storage = torch.zeros(1000).untyped_storage()
_, filename, _ = storage._share_filename_cpu_()
print(json.dumps({"own": "sem." + own._semlock.name[1:], "shared": "sem." + shared._semlock.name[1:],
                  "tensor": filename.decode()[1:], "other": other}), flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not SHARED_MEMORY.is_dir(), reason="/dev/shm: Linux")
def test_killing_a_session_unlinks_the_shared_memory_it_alone_held() -> None:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    assert holder.stdout is not None
    held = json.loads(holder.stdout.readline())
    other = held.pop("other")
    try:
        assert all((SHARED_MEMORY / name).exists() for name in held.values()), held
        kill_session(holder.pid)
        holder.wait()
        # Its resource tracker and torch_shm_manager died with it: nobody else would ever unlink these.
        assert not (SHARED_MEMORY / held["own"]).exists(), "a killed process's named semaphore was left"
        assert not (SHARED_MEMORY / held["tensor"]).exists(), "a killed process's file_system tensor was left"
        assert (SHARED_MEMORY / held["shared"]).exists(), "a semaphore a live process maps was unlinked"
        kill_session(other)  # the last process that mapped it
        assert not (SHARED_MEMORY / held["shared"]).exists()
    finally:
        for pid in (holder.pid, other):
            kill_session(pid)
        for name in held.values():
            (SHARED_MEMORY / name).unlink(missing_ok=True)


def test_a_temporary_directory_too_long_for_a_socket_is_not_made_longer(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path_factory: pytest.TempPathFactory
                                                                        ) -> None:
    """The private TMPDIR adds 12 bytes to the user's: where that would push multiprocessing's socket past
    107 bytes, the loader keeps the user's (a check must not hang a loader that trains)."""
    short = tmp_path_factory.mktemp("t")
    monkeypatch.setattr("tempfile.tempdir", str(short))
    made = private_tmpdir()
    assert made is not None and made.parent == short and made.is_dir()
    made.rmdir()
    edge = short / ("x" * (107 - len("/pymp-00000000/listener-00000000") - len(str(short)) - 6))
    edge.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(edge))
    assert private_tmpdir() is None
    assert os.listdir(edge) == []


def _left(tmp: Path, record: Path) -> list[str]:
    """What a run left in its TMPDIR, and the /dev/shm names its loader recorded (`RECORD_ENV`) still there."""
    held = {name for text in record.glob("*.txt") for name in text.read_text(encoding="utf-8").split()}
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*")) + sorted(
        name for name in held if (SHARED_MEMORY / name).exists())


def _recorded(record: Path) -> int:
    return sum(len(text.read_text(encoding="utf-8").split()) for text in record.glob("*.txt"))


def _check(*args: str) -> list[str]:
    return [sys.executable, "-m", "stateful_contract", "check", *args]


#: Each kind of run: its command and exit statuses. A passing loader's workers are still running when the
#: checker ends its process (`leftover_loaders.KeepsWorkers`), as a user's cache or a reference cycle leaves them:
#: a full run of the reference wrapper left 7 directories once and none another time, as its garbage was collected.
KINDS: dict[str, tuple[list[str], set[int]]] = {
    "passes": (_check(f"{LOADERS}:keeps_workers", "--clause", "SC10", "--profile", "dev"), {0}),
    "fails": (_check(f"{REFERENCE}:mindspeed_wrapper", "--profile", "dev", "--config-space", "num_workers=2"), {1}),
    "hangs": (_check(f"{LOADERS}:hangs", "--clause", "SC10", "--profile", "dev", "--timeout", "5"), {1}),
    "exits": (_check(f"{LOADERS}:exits", "--clause", "SC10", "--profile", "dev", "--timeout", "5"), {1}),
    "grows": (_check(f"{LOADERS}:grows", "--clause", "SC10", "--profile", "dev", "--timeout", "20",
                     "--memory-limit", "1G"), {1}),
    # Spawned workers start in seconds under load: the hang after the first batch may come too late in the
    # example to be told from slowness (not judged, 5; docs/supervision.md, "Slow is not hung"). Either way
    # the checker kills the loader's processes, which is what is counted here.
    "hangs, spawned workers": (_check(f"{LOADERS}:hangs_spawned", "--clause", "SC10", "--profile", "dev",
                                      "--timeout", "20"), {1, 5}),
    "hangs, file_system sharing": (_check(f"{LOADERS}:hangs_file_system", "--clause", "SC10", "--profile", "dev",
                                          "--timeout", "5"), {1}),
    "two ranks": (_check(f"{LOADERS}:keeps_workers", "--clause", "SC30", "--profile", "dev",
                         "--world-size", "2"), {0}),
}


@pytest.mark.acceptance  # about 20 s of CPU each: the README's command stays within its budget
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_check_leaves_nothing_behind(kind: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    command, status = KINDS[kind]
    tmp = tmp_path_factory.mktemp("t")  # short: a socket's path under it must fit
    record = tmp_path_factory.mktemp("record")
    done = subprocess.run(command, env={**os.environ, "TMPDIR": str(tmp), RECORD_ENV: str(record)},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode in status, done.stdout + done.stderr
    assert _left(tmp, record) == [], done.stdout
    if ("spawned" in kind or "file_system" in kind) and not _recorded(record):  # /dev/shm was not looked at
        # Seen once for the spawned kind at load 15 with the hang judged (exit 1): not understood yet; the unit
        # test above covers the semaphores deterministically.
        pytest.skip("the loader recorded no semaphore or tensor in /dev/shm: nothing there was counted")


@pytest.mark.acceptance
def test_a_pytest_run_of_the_mixin_leaves_nothing_behind(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp, here = tmp_path_factory.mktemp("t"), tmp_path_factory.mktemp("mixin")
    (here / "test_loader.py").write_text(
        "from stateful_contract.testing import StatefulLoaderContract\n\n\n"
        "class TestLoader(StatefulLoaderContract):\n    profile = 'dev'\n\n"
        "    def make_loader(self, config):\n        import runpy\n"
        f"        return runpy.run_path({LOADERS!r})['keeps_workers'](config)\n",
        encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "SC10",
                           "test_loader.py"], cwd=here, env={**os.environ, "TMPDIR": str(tmp)},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _left(tmp, here / "nothing") == [], done.stdout


@pytest.mark.acceptance
def test_a_check_ended_by_ctrl_c_leaves_nothing_behind(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("t")
    proc = subprocess.Popen(_check(f"{LOADERS}:hangs", "--clause", "SC10", "--profile", "dev", "--timeout", "60"),
                            env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    limit = time.monotonic() + 300
    while not any(tmp.rglob("pymp-*")) and time.monotonic() < limit:  # the workers have passed a batch
        time.sleep(0.2)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert _left(tmp, tmp / "nothing") == [], out
