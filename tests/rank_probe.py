"""One probe, two launchers: what the user's code sees of the process it runs in.

``torchrun --nproc-per-node N tests/rank_probe.py DIR`` runs it as a script; the contract runs it as the
factory of ``stateful-contract check tests/rank_probe.py:factory --world-size N`` (``DIR`` from
``RANK_PROBE_DIR``). Each process writes ``DIR/rank{RANK}.json`` on its first call, before anything of its own
asks multiprocessing for a start method (the first ``get_start_method()`` fixes it). `tests/isolation/test_rank_process.py`
compares them key by key.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

#: Where the contract's ranks write what they saw (torchrun's are told on their command line).
OUT_ENV = "RANK_PROBE_DIR"

_written = False


def seen() -> dict[str, Any]:
    """What a loader built here would see of its process."""
    import torch

    chosen = multiprocessing.get_start_method(allow_none=True)  # before the next line fixes it
    return {
        "start_method_chosen": chosen,  # None: nobody chose one (a new interpreter)
        "start_method": multiprocessing.get_start_method(),  # what a DataLoader without a context uses
        "process_name": multiprocessing.current_process().name,
        "has_parent_process": multiprocessing.parent_process() is not None,
        "torch_threads": torch.get_num_threads(),
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "sys_path": list(sys.path),
        "argv": list(sys.argv),
    }


def _write(folder: str, rank: int) -> None:
    global _written
    if not _written:
        _written = True
        (Path(folder) / f"rank{rank}.json").write_text(json.dumps(seen()), encoding="utf-8")


def factory(config: Any) -> Any:
    _write(os.environ[OUT_ENV], config.rank)
    return config.stateful_dataloader()


if __name__ == "__main__":
    _write(sys.argv[1], int(os.environ["RANK"]))
