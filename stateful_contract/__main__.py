"""``python -m stateful_contract`` is the ``stateful-contract`` command."""

from ._entry import entry

entry()
