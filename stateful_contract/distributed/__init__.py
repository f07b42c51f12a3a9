"""The in-world mode's public path: `stateful_contract.faces.distributed`."""

from ..faces.distributed import *  # noqa: F403
from ..faces.distributed import __all__ as __all__
