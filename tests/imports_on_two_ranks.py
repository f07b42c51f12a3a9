"""A loader module that imports on 2 ranks and raises at import on any other world size.

Every rank imports the factory before it listens for commands, so the phase a world change
restarts on 1 or 3 ranks never comes up: `tests/clauses/test_world_change.py` checks that this fails
SC31's example (a resume on another world size crashes), not the whole check.
"""

from __future__ import annotations

import os

if os.environ.get("WORLD_SIZE", "2") != "2":
    raise ImportError(f"this loader's module cannot be imported on {os.environ['WORLD_SIZE']} ranks")

from ranked_loaders import refuses_another_world as factory

__all__ = ["factory"]
