"""An exception as one line a stranger can act on: what a failure's ``Got:`` shows of it.

Some exceptions carry their cause deep in a long message: ``torch.load(weights_only=True)`` starts with
"Weights only load failed..." (in terminal bold) and names the refused global five lines down;
``torch.distributed.checkpoint`` raises ``CheckpointException`` whose text is every rank's traceback, the
cause on its last line. The first line alone names nothing, the whole text buries it.
"""

from __future__ import annotations

import re

__all__ = ["exception_text"]

#: Terminal control sequences (torch bolds part of its weights_only message).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: A line that states a cause: ``ValueError: ...``, ``WeightsUnpickler error: ...``.
_CAUSE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)|\w+ error):\s+\S")


def exception_text(error: BaseException) -> str:
    """``str(error)`` without terminal control sequences; a message of several lines whose later line states a
    cause, as its first line and that cause (``first ... cause``); any other message as it is."""
    text = _ANSI.sub("", str(error)).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return text
    causes = [line for line in lines[1:] if _CAUSE.match(line)]
    return f"{lines[0]} ... {causes[-1]}" if causes else text
