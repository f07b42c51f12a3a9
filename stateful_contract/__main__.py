"""``python -m stateful_contract`` is the ``stateful-contract`` command."""

from .faces.entry import entry

entry()
