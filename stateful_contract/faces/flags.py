"""Check's options as command-line flags, for every command line: ``stateful-contract check``, ``python -m
stateful_contract.distributed`` (which is that check on several ranks) and its ``run`` inside a launcher's world.

A flag's spelling and help are `spellings.OPTIONS`'; how argparse reads it (type, default, choices) is
`_READ`, here; `options_of` turns what was read back into the `CheckOptions` a check takes. Each flag's
namespace attribute is its option's ``check()`` keyword (``args.clauses`` for ``--clause``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any, get_args

from ..clauses.distributed import CheckpointLayout
from ..config import ConfigSpace
from ..isolation.supervised import DEFAULT_MEMORY_LIMIT
from ..profiles import DEFAULT_PROFILE, PROFILES
from ..run.options import CheckOptions, OptionError
from ..spellings import OPTIONS, SIZE_UNITS, size_text

__all__ = ["add_options", "options_of", "said", "size_text"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)


def _memory(value: str) -> int | None:
    """``--memory-limit``: ``4G``, ``512MiB``, ``2.5GB``, a number of bytes, or ``none``."""
    if value.strip().lower() in ("none", "off", "0"):
        return None
    found = _SIZE.match(value)
    if found is None:
        raise OptionError("memory_limit", f"takes a size such as 4G or 512M, or 'none', got {value!r}")
    number, unit = float(found.group(1)), found.group(2).upper()
    return int(number * (1 << (10 * SIZE_UNITS.index(unit or " ")))) or None


def _space(items: Sequence[str] | None) -> ConfigSpace:
    """``--config-space NAME=VALUES ...`` as the `ConfigSpace` it narrows the default one to."""
    try:
        return ConfigSpace() if items is None else ConfigSpace.parse(items)
    except ValueError as e:
        raise OptionError("space", str(e)) from None


def _expected(items: Sequence[str]) -> dict[str, str]:
    """``--expect-fail ID=REASON`` as the one form of expected failures (ID -> reason)."""
    out = {}
    for item in items:
        cid, sep, reason = item.partition("=")
        if not sep or not cid.strip() or not reason.strip():
            raise OptionError("expected_failures", f"takes ID=REASON (e.g. SC17='state holds a dataclass'), "
                                                   f"got {item!r}")
        out[cid.strip()] = reason.strip()
    return out


_SWITCH = {"action": "store_true"}
#: How argparse reads each option of `spellings.OPTIONS`, and (second) how its value becomes the `CheckOptions`
#: field (None: as read).
_READ: dict[str, tuple[dict[str, Any], Any]] = {
    "profile": ({"choices": list(PROFILES), "default": DEFAULT_PROFILE}, None),
    "clauses": ({"action": "append", "default": [], "metavar": "ID"}, lambda ids: ",".join(ids) or None),
    "expected_failures": ({"action": "append", "default": [], "metavar": "ID=REASON"}, _expected),
    "checkpoint_alignment": ({"metavar": "epoch|window|N"}, None),
    "epoch_hook": ({"default": CheckOptions.epoch_hook, "metavar": "NAME"}, None),
    "space": ({"nargs": "+", "action": "extend", "metavar": "NAME=VALUES"}, _space),
    "consume": ({"metavar": "MODULE:FUNCTION"}, None),
    "strict": (_SWITCH, None),
    "endless": (_SWITCH, None),
    "world_size": ({"type": int, "default": CheckOptions.world_size, "metavar": "N"}, None),
    "fixed_global_batch": (_SWITCH, None),
    "joins_uneven_inputs": (_SWITCH, None),
    "checkpoint_layout": ({"choices": list(get_args(CheckpointLayout))}, None),
    "trainer_shape": ({"action": "append", "default": [], "metavar": "FACT"}, lambda facts: ",".join(facts)),
    "timeout": ({"type": float, "metavar": "S"}, None),
    "run_timeout": ({"type": float, "metavar": "S"}, None),
    "run_dir": ({"metavar": "DIR"}, None),
    "memory_limit": ({"default": size_text(DEFAULT_MEMORY_LIMIT), "metavar": "SIZE"}, _memory),
    "isolation": (_SWITCH, lambda given: "in-process" if given else None),
    "jobs": ({"type": int, "metavar": "N"}, None),
    "exitfirst": (_SWITCH, None),
    "seed": ({"type": int, "metavar": "N"}, None),
}


def add_options(parser: argparse.ArgumentParser, keywords: Sequence[str], **defaults: Any) -> None:
    """The flags of `check`'s options ``keywords`` (`spellings.OPTIONS` keys), with this command's
    ``defaults`` where they differ (``world_size=2``)."""
    for keyword in keywords:
        how = {**_READ[keyword][0], **({"default": defaults[keyword]} if keyword in defaults else {})}
        parser.add_argument(*OPTIONS[keyword].flags, dest=keyword, help=OPTIONS[keyword].help, **how)


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The `CheckOptions` fields the flags of `add_options` read (`OptionError` for a value none can take)."""
    return {keyword: value if (convert := _READ[keyword][1]) is None else convert(value)
            for keyword, value in vars(args).items() if keyword in _READ}


def said(error: OptionError) -> str:
    """``error`` as a command line says it: its option's flag (``--clause names an unknown clause 'SC99'``), or
    the problem alone for what no single flag holds (``--config and --position go together``)."""
    return f"{OPTIONS[error.option].flag} {error.problem}" if error.option in OPTIONS else error.problem
