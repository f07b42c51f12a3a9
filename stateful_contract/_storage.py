"""Keep Hypothesis' files out of the user's directory while the contract runs.

With ``database=None`` Hypothesis (since 6.131.1) still caches the constants it takes from
the source of every local module under its home, ``.hypothesis/constants/`` in the directory
it was imported from (``constants_from_module``, reached from the first example drawn), and
no setting turns that off. `no_hypothesis_files` points the home at a temporary directory
for a run and restores it afterwards, so the user's own Hypothesis tests in the same process
keep theirs. Not thread-safe: the home is a process-wide global of Hypothesis.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import configuration

__all__ = ["STORAGE_ENV", "no_hypothesis_files"]

#: Read by Hypothesis in a process that has not chosen a home yet: set while the
#: contract runs, for the processes it starts (the ranks of a multi-rank check).
STORAGE_ENV = "HYPOTHESIS_STORAGE_DIRECTORY"


def _current_home() -> Path:
    """The directory Hypothesis writes under now (``.hypothesis`` in the import directory by default)."""
    where = configuration.storage_directory(intent_to_write=False)
    if isinstance(where, Path):  # before Hypothesis 6.152.0, the home's Path itself
        return where
    return where.home_directory


@contextlib.contextmanager
def no_hypothesis_files() -> Iterator[Path]:
    """Run the body, and the processes it starts, with Hypothesis' home in a temporary directory
    (yielded, deleted afterwards). Nothing is lost: with ``database=None`` the only thing written
    there is the constants cache, which Hypothesis rebuilds from the sources when it is missing."""
    previous_home = _current_home()
    previous_env = os.environ.get(STORAGE_ENV)
    with tempfile.TemporaryDirectory(prefix="stateful-contract-hypothesis-", ignore_cleanup_errors=True) as tmp:
        home = Path(tmp) / ".hypothesis"
        configuration.set_hypothesis_home_dir(home)
        os.environ[STORAGE_ENV] = str(home)
        try:
            yield home
        finally:
            configuration.set_hypothesis_home_dir(previous_home)
            if previous_env is None:
                os.environ.pop(STORAGE_ENV, None)
            else:
                os.environ[STORAGE_ENV] = previous_env
