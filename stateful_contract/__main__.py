"""``python -m stateful_contract`` is the ``stateful-contract`` command."""

from .cli import entry

entry()
