"""The pytest mixin's public path: `stateful_contract.faces.testing`."""

from .faces.testing import *  # noqa: F403  (the public names, listed in its __all__)
from .faces.testing import __all__ as __all__
