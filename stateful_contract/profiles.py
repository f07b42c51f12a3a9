"""Run profiles: how hard the contract searches (docs/pytest.md has the table).

Worker examples are fewer than in-process ones in every profile: each costs 0.1 to 1 s of
worker start-up on a 2-core machine against a few ms for an in-process example.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# Hypothesis is imported where it is used: the pytest plugin reads the profiles' names in every pytest run of
# an environment that has the package, and Hypothesis' own plugin leaves Hypothesis unimported until a test
# needs it (0.3 s of a quiet start, paid again by xdist's controller, which runs no test).
if TYPE_CHECKING:
    from hypothesis import settings
    from hypothesis.database import ExampleDatabase

__all__ = ["DATABASE_ENV", "PROFILES", "Profile", "example_database", "examples_home", "get_profile",
           "hypothesis_settings", "register_hypothesis_profiles", "without_local_constants"]

#: Where a random search (``dev``, ``thorough``) keeps the failures it found, so that the next run tries them
#: first, as Hypothesis' example database does for a Hypothesis test: a directory, or ``none``. By default the
#: user's cache directory, never the working tree (the CLI runs in the user's repository).
DATABASE_ENV = "STATEFUL_CONTRACT_DATABASE"


@dataclass(frozen=True)
class Profile:
    name: str
    #: Hypothesis examples per resume clause with ``num_workers=0``.
    examples: int
    #: Hypothesis examples per resume clause with ``num_workers`` in {1, 2}.
    worker_examples: int
    #: Same examples on every run (deterministic verdicts for CI).
    derandomize: bool
    #: Seconds one example may take before the loader counts as hung.
    timeout: float

    def draw_seed(self, seed: int | None = None) -> int | None:
        """The search seed: ``seed`` if given; else a fresh one for a random profile (``dev``,
        ``thorough``), recorded in the report so ``check(..., seed=report.seed)`` runs the same
        examples again; None for a derandomized one (``ci``: the same examples every run)."""
        if seed is not None or self.derandomize:
            return seed
        return random.SystemRandom().randrange(2**32)


#: The profile of a check that names none, in every face (and of a report that records none).
DEFAULT_PROFILE = "ci"

PROFILES: dict[str, Profile] = {
    # Fast feedback while editing a wrapper: finds the common bugs in seconds.
    "dev": Profile("dev", examples=15, worker_examples=2, derandomize=False, timeout=20.0),
    # The default: deterministic, so a CI verdict does not flip between runs.
    # 4 worker examples per clause, drawn from the check's pool of worker configs and aimed at
    # the points where worker bugs show (batch counts the worker count does not divide, hops
    # shorter than it, 1 <-> 2 worker changes). 16 ran the full check 3x slower here (94 s
    # against 31 s, the import 2 s) and killed no more of the zoo and museum: docs/performance.md.
    "ci": Profile("ci", examples=40, worker_examples=4, derandomize=True, timeout=30.0),
    # Before a release or after a bug: many more examples, still bounded.
    "thorough": Profile("thorough", examples=400, worker_examples=64, derandomize=False, timeout=60.0),
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}") from None


def examples_home() -> Path | None:
    """The directory of the contract's example databases (`DATABASE_ENV`), None when turned off."""
    chosen = os.environ.get(DATABASE_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "none", "off", "0") else Path(chosen).expanduser()
    if sys.platform == "darwin":
        cache = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        cache = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "stateful-contract" / "examples"


def example_database(profile: Profile, *parts: str) -> ExampleDatabase | None:
    """The example database of one clause of one loader (``parts``), None for a derandomized profile (``ci``:
    the same examples every run; Hypothesis keeps no database with it either) or when turned off."""
    home = examples_home()
    if profile.derandomize or home is None:
        return None
    from hypothesis.database import DirectoryBasedExampleDatabase

    return DirectoryBasedExampleDatabase(home / hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24])


def hypothesis_settings(profile: Profile, *, workers: bool) -> settings:
    """Hypothesis settings for one phase (in-process or worker examples) of a clause."""
    # No deadline: the engine enforces its own per-example timeout, and Hypothesis' would flag the
    # (legitimately slower) worker examples as flaky. No example database: every search is seeded, and a
    # seeded test keeps none; the failures found are kept by `search.saved` instead. No explain phase: it re-runs hundreds of variants of the minimal example to
    # annotate it (7 of 9 seconds on a failing clause); our reproduction says more. Quiet: Hypothesis would
    # print "You can reproduce this failure by adding @seed(...)" after a hang or a crash; the outcome says
    # how to reproduce it, in the loader's own terms.
    from hypothesis import HealthCheck, Phase, Verbosity, settings

    return settings(max_examples=profile.worker_examples if workers else profile.examples,
                    derandomize=profile.derandomize, deadline=None, database=None, verbosity=Verbosity.quiet,
                    suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Hypothesis' draws in this block use no constants of the process's own modules, so that a search's
    examples (a ``ci`` verdict) do not depend on what else the process imported.

    Hypothesis (6.131 on) draws 5% of its values from literals found in the "local" modules loaded at the
    time (``hypothesis.internal.conjecture.providers._get_local_constants``: every module in ``sys.modules``
    outside site-packages and tests, the checked loader's and an editable install of this package
    included). A derandomized search then drew other examples alone than inside a test session that had
    imported more of them: nodes_sequential's SC11 (F18) failed in 27 examples in a process that had
    imported ``stateful_contract.faces.badge`` and passed all 45 in one that had not (2026-12-06). Hypothesis
    has no setting for it; where its internals differ, nothing is changed."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants

        cache, original = providers.CONSTANTS_CACHE, providers._get_local_constants
    except (ImportError, AttributeError):  # a Hypothesis without local constants, or with other internals
        yield
        return
    none = Constants()
    cache.cache.clear()  # the choices it holds were filtered from the local constants
    providers._get_local_constants = lambda: none
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


def register_hypothesis_profiles() -> None:
    """Register ``stateful-contract-<name>`` Hypothesis profiles (for ``--hypothesis-profile``)."""
    from hypothesis import settings

    for p in PROFILES.values():
        settings.register_profile(f"stateful-contract-{p.name}", max_examples=p.examples,
                                  derandomize=p.derandomize, deadline=None, database=None)
