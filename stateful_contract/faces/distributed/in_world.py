"""``python -m stateful_contract.distributed run TARGET``: the contract inside your launcher's world.

Every rank of the job runs this command; the launcher starts them::

    torchrun --nnodes 2 --node-rank R --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        -m stateful_contract.distributed run my_pkg.loaders:factory --clause SC30,SC31 --json report.json
    srun python -m stateful_contract.distributed run my_pkg.loaders:factory --dir /shared/sc
    mpirun -np 4 python -m stateful_contract.distributed run my_pkg.loaders:factory --master-addr node01

Each rank joins through ``env://`` (SLURM's and Open MPI's variables are mapped onto
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` where ``RANK`` is unset) on the backend
``--backend`` (default: hccl with torch_npu, nccl with CUDA, else gloo), with a gloo
group beside it for commands. Rank 0 runs the search and the judgement; the others run
its commands. Rank 0 writes the one report (``--json``) and every rank exits with the
same status: 0 when every clause passed, 1 when one failed, 2 when the target cannot be
used. ``--phase save --dir D`` and, in a later launch, ``--phase resume --dir D`` split a
check in two jobs, as a trainer resumes (`stateful_contract.faces.distributed.phases`);
``--phase restart --dir D`` under ``torchrun --max-restarts 1`` does both in one launch, the
first attempt exiting on purpose (`stateful_contract.faces.distributed.phases`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch.distributed as dist

from ...isolation.leftovers import use_tmpdir
from ...isolation.noise import ignore_set_vital
from ...isolation.processes import alive, descendants, kill_processes
from ...isolation.ranks import default_run_timeout
from ...isolation.ranks.in_world import InWorld, default_backend, follow, join, launch_line, launcher_env
from ...isolation.ranks.world import local_pids
from ...isolation.target import TargetError
from ...isolation.workspace import launch_tmpdir, leave, loaders_tmpdir, sweep
from ...profiles import get_profile
from ...report.results import Report
from ...run.check import CheckInterrupted, FactoryError, check
from ...run.options import CheckOptions, OptionError
from ...spellings import OF_ITS_OWN_PROCESSES, OPTIONS, speaking
from .. import cli, flags, replay
from ..live import QUIET_HELP, shown
from . import phases

__all__ = ["exit_now", "main"]


#: `check`'s options `run` takes: those the engine on rank 0 reads (what is searched, judged and declared). Not
#: the ones of the processes a check starts itself (`spellings.OF_ITS_OWN_PROCESSES`: ``--world-size``,
#: ``--run-dir``, ``--run-timeout``, for which the launcher's world and ``--dir`` stand, ``--memory-limit``,
#: ``--in-process``, ``--jobs``). Without ``--config-space`` a loader built for part of the space
#: (``persistent_workers=True``) could not be checked in its world at all, though the refusal told its user to
#: narrow the space.
RUN_OPTIONS = [keyword for keyword in OPTIONS if keyword not in OF_ITS_OWN_PROCESSES]


def _parser() -> argparse.ArgumentParser:
    parser = cli.Parser(prog="python -m stateful_contract.distributed run", description=__doc__,
                        formatter_class=cli.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="package.module:factory or path/to/file.py:factory (the same on every rank)")
    # `check`'s own flags (`spellings.OPTIONS`); without --clause, every clause for several ranks (in --phase
    # resume, those the save judged)
    flags.add_options(parser, RUN_OPTIONS)
    replay.add_example_arguments(parser)
    cli.add_output_arguments(parser)  # rank 0 writes the report
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)  # rank 0 shows it
    parser.add_argument("--backend", help="the world's backend (default: hccl with torch_npu, nccl with CUDA, "
                                          "else gloo); commands travel through a gloo group beside it")
    parser.add_argument("--phase", choices=("run", "save", "resume", "restart"), default="run",
                        help="run: one launch; save, then resume in a later launch: two jobs (with --dir); "
                             "restart: both in one torchrun --max-restarts 1, the first attempt exiting on "
                             "purpose (with --dir)")
    parser.add_argument("--dir", help="the run's directory, the same path on every rank (shared storage across "
                                      "machines); kept. Default: a temporary one, deleted")
    parser.add_argument("--master-addr", help="MASTER_ADDR where the launcher sets none (srun, mpirun); default: "
                                              "the first host of SLURM_NODELIST, or 127.0.0.1 under mpirun")
    parser.add_argument("--master-port", help="MASTER_PORT where the launcher sets none (default 29500)")
    return parser


def _judge(args: argparse.Namespace, world: Any, run_dir: Path) -> Report:
    """Rank 0: the report."""
    options = CheckOptions(**flags.options_of(args), world_size=world.world_size, run_dir=run_dir)
    with shown(args.quiet) as live:  # as `stateful-contract check` shows it, from rank 0
        try:
            if args.phase == "resume":
                report = phases.resume(world.world_size, run_dir, args.target, options, progress=live)
            else:
                report = check(args.target, options, replay=replay.example_of(args), progress=live)
        except CheckInterrupted as e:
            report = e.report
            report.notes.append("rank 0 was stopped (SIGTERM from the launcher, or Ctrl-C): another rank failed or "
                                "the job was cancelled; the launcher's error summary names the rank")
        live.finish(report)
    if args.phase == "save" and InWorld.last is not None:
        phases.write_manifest(run_dir, InWorld.last, report)
    return report


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """``own_process``: this process is the command's (``python -m stateful_contract.distributed run``), not a
    user's script's (`run_in_world`): the loader's temporary files go to a directory of the rank's own, and the
    loader's processes still running when the rank leaves are the check's to end (`exit_now`)."""
    with speaking("cli"):  # every rank's hints name a command line's options
        return _main(argv, own_process)


def _main(argv: Sequence[str] | None, own_process: bool) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.phase != "run" and not args.dir:
        parser.error(f"--phase {args.phase} needs --dir, the directory both launches share")
    # A script that made its world itself (`main` called after its own init_process_group) is in it already.
    own_world = dist.is_initialized()
    if not own_world:
        os.environ.update(launcher_env(os.environ, master_addr=args.master_addr, master_port=args.master_port))
    if not own_world and ("RANK" not in os.environ or "WORLD_SIZE" not in os.environ):
        phases.say("no launcher's world here (RANK and WORLD_SIZE are unset, and no SLURM_PROCID or "
                   "OMPI_COMM_WORLD_RANK): start it with torchrun, srun or mpirun, or use "
                   "'python -m stateful_contract.distributed TARGET --world-size N', which starts its own")
        return 2
    restarting = args.phase == "restart"
    if restarting:
        number = phases.attempt(os.environ)
        if isinstance(number, str):
            phases.say(number)
            return 2
        args.phase = "save" if number == 0 else "resume"
        if number and (repeated := phases.saved(Path(args.dir).resolve())) is not None:
            return repeated  # the save failed (or never finished): its verdict again, nothing to resume
    ignore_set_vital()  # torchdata's deprecation warning, once per loader, on every rank
    keep = bool(args.dir)  # without --dir, rank 0 makes a private directory and tells the others (`join`)
    backend = str(dist.get_backend()) if own_world else args.backend or default_backend()
    # The group gives up on a rank gone silent after this long; the engine ends hangs inside examples sooner.
    timeout = default_run_timeout(get_profile(args.profile), 40) + 60
    world = join(Path(args.dir).resolve() if keep else None, backend=backend, timeout=timeout)
    run_dir = world.run_dir
    if own_process:  # after `join`: the run's directory stays where a rank on another host can make it too
        # Every rank's, and the resume launch's (removed with the run's directory); where a socket's path under it
        # would be too long, the rank's own (`loaders_tmpdir`), else the user's.
        use_tmpdir(launch_tmpdir(run_dir) or loaders_tmpdir())
    launch = launch_line(os.environ, world.world_size, own_world=own_world)
    try:
        if world.rank != 0:
            code = int(follow(world)[1])
            if restarting and code == phases.RESTART_EXIT:
                phases.say(f"rank {world.rank}: {phases.ON_PURPOSE}")
            return code
        # The launcher stops every rank (SIGTERM) once one failed: rank 0 still writes what it judged.
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # raises KeyboardInterrupt
        InWorld.joined = (world, args.phase, launch)  # the launch line its rerun hints name
        if restarting and args.phase == "save":
            phases.clear(run_dir)
        report: Report | None = None
        try:
            report = _judge(args, world, run_dir)
            if restarting and args.phase == "resume":
                report = phases.merged(run_dir, report)
            code = 0 if report.passed else 1
        except (TargetError, FactoryError, FileNotFoundError, ValueError) as e:
            said = flags.said(e) if isinstance(e, OptionError) else str(e)  # an option spelled as its flag: --clause
            phases.say(said)
            code = 2
        except BaseException:
            if InWorld.last is None or not InWorld.last.down:
                world.stop(1)  # the others must not wait for a command that never comes
            if not keep:  # stopped by the launcher (another rank failed) or Ctrl-C: nothing resumes from it
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
        finally:
            InWorld.joined = None
        if report is not None:
            report.notes.append(f"backend {backend} (commands on a gloo group), "
                                + (f"in {launch}" if own_world else f"launched as: {launch}"))
            cli.write_report(report, args)  # rank 0's, with --json, --junit or --markdown where given
        if InWorld.last is not None and InWorld.last.down:
            # A rank is gone or stuck: no verdict can reach it. The ranks left on this host are ended here
            # (a launcher would, but srun and mpirun may wait for a stuck one); exiting tells the launcher.
            sys.stdout.flush()
            stuck = [pid for rank, pid in local_pids(run_dir, world.world_size).items() if rank and alive(pid)]
            workers = descendants(stuck)  # read before they are orphaned: then nothing says whose they were
            _local_ranks_ended(run_dir, world.world_size, (signal.SIGTERM, signal.SIGKILL), seconds=1.0)
            kill_processes(workers)  # an orphaned worker whose directory is swept prints tracebacks as it exits
            sweep()  # the workspaces of the ranks just ended, whose exit could not remove them
            if not keep:  # os._exit runs no cleanup: the private directory went with it (56 in /tmp, 2026-12-07)
                shutil.rmtree(run_dir, ignore_errors=True)
            exit_now(code or 1, end_children=own_process)
        if restarting and args.phase == "save":
            if report is not None:  # for the attempts the agent starts next
                report.to_json(run_dir / phases.SAVE_REPORT)
            if code == 0:
                code = phases.RESTART_EXIT
                phases.say(f"rank 0: the save passed; {phases.ON_PURPOSE}")

        def stopped(signum: int, frame: Any) -> NoReturn:
            if not keep:
                shutil.rmtree(run_dir, ignore_errors=True)
            exit_now(code, end_children=own_process)

        # The launcher stops rank 0 (SIGTERM) as soon as another rank exits with a failure (or, restarting, on
        # purpose): rank 0 then leaves as it would have, not with a KeyboardInterrupt's traceback.
        signal.signal(signal.SIGTERM, stopped)
        world.stop(code)  # every rank exits with rank 0's status
        # Rank 0 leaves last. Exiting first with a failure, it would have the launcher stop the others
        # (SIGTERM) before they exit with the verdict themselves; and without a launcher's store (srun,
        # mpirun) it hosts the group's store, which must outlive the others' goodbyes.
        _local_ranks_ended(run_dir, world.world_size, (0,), seconds=10.0)
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)
        return code
    finally:
        if dist.is_initialized() and not own_world:  # the script's own world is the script's to end
            dist.destroy_process_group()


def _local_ranks_ended(run_dir: Path, world_size: int, signals: Sequence[int], seconds: float) -> None:
    """Each of ``signals`` in turn to the other ranks on this host still running (`local_pids`), then up to
    ``seconds`` for them to exit (signal 0 sends nothing: only the wait). Not psutil's ``wait_procs``: the
    ranks are the launcher's children, and one exited but not yet reaped is a zombie it would wait for."""
    pids = [pid for rank, pid in local_pids(run_dir, world_size).items() if rank and alive(pid)]
    for sig in signals:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if alive(pid)]
            time.sleep(0.05)


def exit_now(code: int, *, end_children: bool = True) -> NoReturn:
    """End the rank with ``code`` once its output is flushed, without the interpreter's teardown: there, the
    destructors of gloo's and the store's C++ threads may find them running and abort the process ("terminate
    called without an active exception", SIGABRT; once in many launches under load), and the launcher then
    reports a crash where the verdict was ``code``. No finalizer runs either: the rank removes its workspace
    itself (`workspace.leave`), after ending its loaders' workers still running (``end_children``; not a user's
    script's): ended by the launcher's SIGTERM or SIGKILL to the rank's group, they kept their ``pymp-*``
    directories (a passing check on 2 ranks left 84, docs/supervision.md). The launcher's stop signals are
    ignored from here: torchrun stops rank 0 (SIGTERM) once another rank exits with a failure, and its handler,
    itself an ``exit_now``, cut the removal begun here short (``os._exit`` with the workspace half removed, its
    lock file first: no sweep takes it; the in-world hang's leftovers test, once in four runs under load).
    Ignored, not blocked: a signal blocked in this thread reaches the handler through another (gloo's)."""
    for stop in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stop, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    leave(end_children=end_children)
    os._exit(code)
