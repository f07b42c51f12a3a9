"""A dataset folder written once per key, at a fixed path, for the streaming loaders' rows.

litdata and mosaicml-streaming read their samples from a directory, and their states
record it: a loader resumed in another process must find the same one, so the path is
fixed (``<tempdir>/stateful-contract-<kind>/<key>``). The folder is written into a scratch
directory and renamed into place, so concurrent ranks never read half a dataset.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["written_once"]


def written_once(kind: str, key: str, write: Callable[[str], None]) -> str:
    """``<tempdir>/stateful-contract-<kind>/<key>``, filled by ``write(scratch)`` if it has no ``index.json`` yet."""
    root = Path(tempfile.gettempdir()) / f"stateful-contract-{kind}"
    target = root / key
    if not (target / "index.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.mkdtemp(dir=root, prefix="writing-")
        write(scratch)
        try:
            os.rename(scratch, target)
        except OSError:  # another process put it there first: the same contents
            shutil.rmtree(scratch, ignore_errors=True)
    return str(target)
