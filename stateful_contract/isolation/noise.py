"""The one warning the contract silences: torchdata's ``set_vital`` deprecation (docs/findings.md, F7).

Noise about the base loader, printed in every process that builds one, that hid the output that matters.
Only that warning is filtered, and only where torchdata raises it: a loader's own warnings still show.
"""

from __future__ import annotations

import re
import warnings

__all__ = ["SET_VITAL", "ignore_set_vital"]

#: The start of the warning's text.
SET_VITAL = "'set_vital' is deprecated"


def ignore_set_vital() -> None:
    """Filter torchdata's ``set_vital`` warning in this process (inside a ``catch_warnings`` block: in it)."""
    warnings.filterwarnings("ignore", message=re.escape(SET_VITAL), category=UserWarning, module=r"torchdata\b")
