"""Failures a random search found, kept for the next run, which tries them first: what Hypothesis' example
database does for a Hypothesis test (docs/pytest.md, "Hypothesis' conventions").

The contract seeds every random search (``@seed``, so that the report's seed reruns it), and a seeded
Hypothesis test keeps no database. So the minimal failing example itself is kept, its config and plan, in a
Hypothesis `DirectoryBasedExampleDatabase` (`stateful_contract.profiles.example_database`: the user's cache
directory by default, one per loader and clause), and run before the search; once it passes, it is dropped.
A derandomized search (``ci``) keeps none, as Hypothesis does not, nor does a run given its seed.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from ..config import LoaderConfig
from ..profiles import Profile, example_database

__all__ = ["SavedFailures"]

#: The database key the examples are kept under (one database per loader and clause).
KEY = b"stateful-contract-failures"


class SavedFailures:
    """The failing examples kept for one clause of one loader (nothing, where the profile keeps none)."""

    def __init__(self, profile: Profile, loader: str | None, clause_id: str) -> None:
        self.database = None if loader is None else example_database(profile, loader, clause_id)

    def __iter__(self) -> Iterator[tuple[LoaderConfig, Any]]:
        if self.database is None:
            return
        for value in sorted(self.database.fetch(KEY)):
            try:
                config, plan = pickle.loads(value)  # written by `keep`, in the user's own cache directory
            except Exception:  # a release whose classes changed: the example is of no use, drop it
                self.database.delete(KEY, value)
                continue
            if isinstance(config, LoaderConfig):
                yield config, plan

    def keep(self, config: LoaderConfig, plan: Any) -> None:
        if self.database is not None:
            self.database.save(KEY, pickle.dumps((config, plan)))

    def drop(self, config: LoaderConfig, plan: Any) -> None:
        """The example passes now: the next run searches afresh."""
        if self.database is not None:
            self.database.delete(KEY, pickle.dumps((config, plan)))
