"""``--config LoaderConfig(...) --position Position(...)`` read from a command line, without eval."""

from __future__ import annotations

import argparse

from .._engine.steps import Position
from ..config import LoaderConfig
from ..profiles import PROFILES
from ..replay import ReplayError, parse_value

__all__ = ["add_example_arguments", "replay_of"]


def add_example_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both commands share: the profile, the example timeout, and one example to replay."""
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument("--timeout", type=float, help="seconds one example may take on a rank")
    parser.add_argument("--config", help="replay this LoaderConfig(...) (with --position)")
    parser.add_argument("--position", help="replay this checkpoint Position(...) (with --config)")


def replay_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[LoaderConfig, Position] | None:
    """The example ``--config`` and ``--position`` name, if any (a usage error when only one is given)."""
    if (args.config is None) != (args.position is None):
        parser.error("--config and --position go together")
    if args.config is None:
        return None
    example = []
    for text, expected in ((args.config, LoaderConfig), (args.position, Position)):
        try:  # literals and the one dataclass only: no eval
            example.append(parse_value(text, {expected.__name__: expected}))
        except ReplayError as e:
            parser.error(str(e))
        if not isinstance(example[-1], expected):
            parser.error(f"expected {expected.__name__}(name=value, ...), got {text!r}")
    return example[0], example[1]
