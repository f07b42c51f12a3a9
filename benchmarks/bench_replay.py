"""Benchmark: `stateful-contract replay report.json SC10` against the import it cannot avoid.

    python benchmarks/bench_replay.py [--repeat 5]

Records a failing report once (the seed's wrapper, in-process, where SC10 fails), then
times, in fresh processes and as medians over ``--repeat`` rounds (each round runs both
commands once, so a noisy machine slows both alike): the bare import
``python -c "import torch, torchdata.stateful_dataloader, hypothesis"`` and the replay of
SC10's minimal failing example. The target is a replay in under 5 s on 2 cores; the ratio
to the import is what carries over to another machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
BASELINE = [PY, "-c", "import torch, torchdata.stateful_dataloader, hypothesis"]
TARGET = "stateful_contract.reference.factories:mindspeed_wrapper"


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        report = str(Path(folder) / "report.json")
        subprocess.run([PY, "-m", "stateful_contract", "check", TARGET, "--in-process", "--clause", "SC10",
                        "--json", report], capture_output=True, check=False, cwd=folder)
        replay = [PY, "-m", "stateful_contract", "replay", report, "SC10"]
        shown = subprocess.run(replay, capture_output=True, text=True, check=False)
        if "SC10 fails again:" not in shown.stdout:  # time a replay, not an error message
            raise SystemExit(f"the replay did not reproduce the failure:\n{shown.stdout}{shown.stderr}")
        rounds = [(timed(BASELINE), timed(replay)) for _ in range(args.repeat)]
    base = statistics.median(b for b, _ in rounds)
    again = statistics.median(r for _, r in rounds)
    print(f"load average {os.getloadavg()[0]:.1f}, median of {args.repeat}")
    print("| measurement | median | ratio | target |\n|---|---|---|---|")
    print(f"| `import torch, torchdata, hypothesis` (baseline) | {base:.2f} s | 1.0x | |")
    print(f"| `stateful-contract replay report.json SC10` | {again:.2f} s | {again / base:.2f}x | < 5 s |")


if __name__ == "__main__":
    main()
