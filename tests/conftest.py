"""Test-suite plumbing: the zoo of broken loaders is imported as a plain module, and every search
a test starts with a random profile is seeded from the test's own id."""

import os
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# A random profile's failures are kept for the next run (stateful_contract.profiles.example_database): the
# suite's searches must stay the same on every run, so none is kept, here and in every process a test starts.
# tests/search/test_hypothesis_conventions.py turns it on where it is the subject.
os.environ["STATEFUL_CONTRACT_DATABASE"] = "none"


@pytest.fixture(autouse=True)
def _searches_seeded_by_the_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``dev`` or ``thorough`` check draws a fresh seed per run (`Profile.draw_seed`), as a user
    exploring wants; a test that asserts a kill must not depend on one. About one ``dev`` search in
    twenty misses SC21's broken loader (19 kills of 20 seeds, measured 2026-12-04), which is how a
    2-rank kill test failed in CI. Each test now runs the same searches on every run, and different
    tests still run different ones. A test that passes its own ``seed=`` keeps it; checks in a
    child interpreter (the CLI in a subprocess) draw their own, as a user's do."""
    from stateful_contract.profiles import Profile

    drawn = Profile.draw_seed
    test_seed = zlib.crc32(request.node.nodeid.encode())

    def draw_seed(self: Profile, seed: int | None = None) -> Any:
        return test_seed if seed is None and not self.derandomize else drawn(self, seed)

    monkeypatch.setattr(Profile, "draw_seed", draw_seed)


@pytest.fixture
def cli_options(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli_options(TARGET, *FLAGS)``: the `CheckOptions` that ``stateful-contract check TARGET FLAGS`` runs its
    check with. The command runs as a user's does, through the CLI's `main`, up to the public `check` every
    face calls, which here records what it was given instead of checking."""
    from stateful_contract import Report
    from stateful_contract.faces import cli

    def options(*argv: str) -> Any:
        given: list[Any] = []

        def recorded(target: Any, options: Any, **_: Any) -> Report:
            given.append(options)
            return Report(str(target), [])

        monkeypatch.setattr(cli, "check", recorded)
        code = cli.main(["check", *argv, "--quiet"])
        assert given, f"the command line did not reach check(): exit {code}"
        return given[0]

    return options
