"""``python -m stateful_contract`` is the ``stateful-contract`` command."""

import sys

from .cli import main

sys.exit(main())
