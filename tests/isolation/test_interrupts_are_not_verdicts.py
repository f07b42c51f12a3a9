"""What is not the loader's stops the run and is no verdict: pytest-timeout's signal method, Ctrl-C, SystemExit.

pytest-timeout (``--timeout-method signal``) raises pytest's ``Failed`` from its SIGALRM handler, in whatever
code the alarm lands in: in the loader's ``state_dict()`` (in-process), or in the caller waiting for the
loader's process (supervised). The engine took the first for the loader's exception and Hypothesis the second
for a failure it could not reproduce ("FlakyFailure"): either way the check went on past the test's time
limit, SC10 came out failed, and the test that was over its limit passed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from charged import run as run_charged

from stateful_contract.repro.steps import is_the_loaders

ROOT = Path(__file__).resolve().parents[2]

INNER = """
import os, time
import zoo
from stateful_contract import ConfigSpace, check

class SlowState(zoo.EpochLoader):
    def state_dict(self):
        time.sleep(0.2)  # a search of SC10 takes many seconds: the 3 s limit lands in here, or in the wait for it
        return super().state_dict()

@pytest.mark.parametrize("isolation", ["in-process", "supervised"])
def test_check_over_its_time_limit(isolation):
    report = check(SlowState, clauses=["SC10"], profile="dev", space=ConfigSpace(num_workers=(0,)),
                   isolation=isolation, jobs=1, timeout=0, seed=1)
    print("VERDICT", isolation, report["SC10"].status, report["SC10"].got[:200])
"""


@pytest.mark.acceptance  # pytest in pytest running a check until pytest-timeout's signal (45 s at load 12)
def test_pytest_timeouts_signal_ends_the_check_and_is_no_verdict(tmp_path: Path) -> None:
    pytest.importorskip("pytest_timeout")
    (tmp_path / "test_inner.py").write_text("import pytest\n" + INNER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "STATEFUL_CONTRACT_DATABASE": "none"}
    done = run_charged([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", "--timeout", "3",
                        "--timeout-method", "signal", "-o", "addopts=", "--rootdir", str(tmp_path),
                        str(tmp_path / "test_inner.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert "VERDICT" not in out, out[-4000:]  # the check came to no verdict
    assert out.count("Failed: Timeout (>3.0s) from pytest-timeout") >= 2, out[-4000:]
    assert "2 failed" in out, out[-4000:]


def test_only_exceptions_and_dcps_checkpoint_exception_are_the_loaders() -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    assert is_the_loaders(ValueError("bad state")) and is_the_loaders(StopIteration())
    assert is_the_loaders(CheckpointException("load failed on rank 0", {}))  # DCP's BaseException
    for other in (KeyboardInterrupt(), SystemExit(1), GeneratorExit(), pytest.fail.Exception("Timeout")):
        assert not is_the_loaders(other), other


@pytest.mark.parametrize("where", ["coverage_of", "draw", "config"])
def test_a_timeout_outside_the_loaders_calls_is_no_verdict_either(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The alarm may land in the engine's own code between the loader's calls (counting an example's coverage,
    drawing its plan): Hypothesis took pytest's ``Failed`` there for a failure, replayed the example without it
    and reported the loader's "FlakyStrategyDefinition" (the acceptance run of the test above, once, 2026-12-07)."""
    import zoo
    from hypothesis import currently_in_test_context

    from stateful_contract import ConfigSpace, check
    from stateful_contract.search import loop

    alarms = [pytest.fail.Exception("Timeout (>3.0s) from pytest-timeout.")]  # lands once, as an alarm does

    def lands_once(*args: object) -> None:
        if alarms and currently_in_test_context():  # inside Hypothesis' search, not a clause's explicit example
            raise alarms.pop()

    if where == "coverage_of":
        real = loop.coverage_of
        monkeypatch.setattr(loop, "coverage_of", lambda *a: (lands_once(), real(*a))[1])
    elif where == "config":  # inside Hypothesis' own draw of the example's arguments, before the example's body
        from stateful_contract.config import ConfigSpace as Space

        real_configs = Space.configs
        monkeypatch.setattr(Space, "configs", lambda self, **k: real_configs(self, **k).map(
            lambda config: (lands_once(), config)[1]))
    else:
        from stateful_contract.clauses.registry import Clause

        real_draw = Clause.draw_plan
        monkeypatch.setattr(Clause, "draw_plan", lambda *a, **k: (lands_once(), real_draw(*a, **k))[1])
    with pytest.raises(pytest.fail.Exception, match="from pytest-timeout"):
        check(zoo.EpochLoader, clauses=["SC10"], profile="dev", space=ConfigSpace(num_workers=(0,)),
              isolation="in-process", seed=1)
    assert not alarms
