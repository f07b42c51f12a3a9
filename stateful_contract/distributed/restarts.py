"""``--phase restart``: the two jobs of `stateful_contract.distributed.phases` in one torchrun.

torchrun's agent restarts every worker when one exits non-zero, at most ``--max-restarts``
times, and tells each attempt its number (``TORCHELASTIC_RESTART_COUNT``, 0 first) and the
limit (``TORCHELASTIC_MAX_RESTARTS``; both set by torch.distributed.elastic's local agent).
Attempt 0 runs the save; when its search passed, every rank exits with `RESTART_EXIT` on
purpose, so that the agent restarts the job: fresh processes, as after a crash. Attempt 1
(or a later one) resumes the saved examples and exits with the verdict. When the save
itself failed, attempt 0 exits with its verdict and the next attempt, started by the agent
all the same, repeats it without resuming: a failed search is never hidden by a resume.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from ..report import Report
from .phases import MANIFEST

__all__ = ["RESTART_EXIT", "attempt", "clear", "merged", "record_save", "saved"]

#: The status of every rank of attempt 0 after a passing save (EX_TEMPFAIL: "try again").
RESTART_EXIT = 75
#: Rank 0's record of attempt 0 in the shared directory: the save's exit status.
RECORD = "in-world-restart.json"
#: The save's report, merged into the resume's so the one report covers every clause.
SAVE_REPORT = "in-world-save-report.json"
ON_PURPOSE = "exiting on purpose so that torchrun restarts the job (--max-restarts)"


def attempt(env: Mapping[str, str]) -> int | str:
    """This launch's attempt number (0 first), or why ``--phase restart`` cannot run here."""
    count, limit = env.get("TORCHELASTIC_RESTART_COUNT"), env.get("TORCHELASTIC_MAX_RESTARTS")
    if count is None or limit is None:
        return ("--phase restart needs torchrun's elastic restart: launch it with torchrun --max-restarts 1 (or "
                "more); under srun or mpirun, run --phase save and then --phase resume as two jobs")
    if int(limit) < 1:
        return ("--phase restart exits on purpose after the save so that torchrun restarts the job, and this "
                f"torchrun restarts it {limit} times: add --max-restarts 1")
    return int(count)


def clear(run_dir: Path) -> None:
    """Attempt 0, rank 0: forget an earlier run's save in the same directory."""
    for name in (MANIFEST, RECORD, SAVE_REPORT):
        (run_dir / name).unlink(missing_ok=True)


def record_save(run_dir: Path, code: int, report: Report | None) -> None:
    """Attempt 0, rank 0: the save's status (and report) for the attempts the agent starts next."""
    if report is not None:
        report.to_json(run_dir / SAVE_REPORT)
    (run_dir / RECORD).write_text(json.dumps({"save_exit": code}) + "\n", encoding="utf-8")


def saved(run_dir: Path) -> int | None:
    """Attempt 1 or later, any rank: None to resume, or the status to exit with (said on stderr)."""
    path = run_dir / RECORD
    if not path.is_file():
        print(f"stateful_contract.distributed run: {path} does not exist: the first attempt (the save) did not "
              f"finish, so there is nothing to resume; its ranks' output above says why", file=sys.stderr)
        return 2
    code = int(json.loads(path.read_text(encoding="utf-8"))["save_exit"])
    if code == 0:
        return None
    print(f"stateful_contract.distributed run: the first attempt's save exited with {code} (its report was "
          f"printed then, and written to --json); not resuming", file=sys.stderr)
    return code


def merged(run_dir: Path, resumed: Report) -> Report:
    """The resume's report, with the save's result for every clause the resume did not judge."""
    path = run_dir / SAVE_REPORT
    if not path.is_file():
        return resumed
    save = Report.from_json(path)
    by_id = {r.id: r for r in save.results}
    resumed.results = [by_id[r.id] if r.status == "not-judged" and r.id in by_id
                       and by_id[r.id].status != "not-judged" else r for r in resumed.results]
    resumed.notes.insert(0, "one torchrun: attempt 0 saved and exited on purpose, the agent restarted the job "
                            "(--max-restarts), this attempt resumed; clauses the resume does not judge keep "
                            "the save's result")
    return resumed
