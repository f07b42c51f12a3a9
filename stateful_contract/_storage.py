"""Keep Hypothesis' files out of the user's directory while the contract runs.

The contract runs Hypothesis with ``database=None``, and Hypothesis still writes
``.hypothesis/constants/`` into the working directory. Since 6.131.1 it seeds generated
values with constants taken from the source of every *local* module that is imported
(neither the standard library nor site-packages: the user's factory module and its
package, and this package when it is installed editable), and it caches them, one file
per source file, under its home directory: ``storage_directory("constants")`` in
``hypothesis.internal.constants_ast.constants_from_module``, reached from the first
example drawn (``HypothesisProvider._local_constants``). The home directory is
``.hypothesis`` in the directory Hypothesis was imported from, unless
``HYPOTHESIS_STORAGE_DIRECTORY`` or ``hypothesis.configuration.set_hypothesis_home_dir``
says otherwise, and no setting turns the collection off.

`no_hypothesis_files` points that home at a temporary directory for the duration of a
run and restores it afterwards, so that the user's own Hypothesis tests (and their
example database) in the same process keep the home they had. Not thread-safe: the home
is a process-wide global of Hypothesis.
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
    """Run the body with Hypothesis' home in a temporary directory, deleted afterwards.

    Covers this process (``set_hypothesis_home_dir``) and the processes started in the
    body (``HYPOTHESIS_STORAGE_DIRECTORY``); both are restored on exit. Yields the
    temporary home. Nothing is lost: with ``database=None`` the only thing written there
    is the constants cache, which Hypothesis rebuilds from the sources when it is missing.
    """
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
