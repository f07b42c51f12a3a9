"""Reference loaders: the corrected grad-accumulation wrapper, MindSpeed-MM's broken ones, factories.

- `PrefetchGradAccDataLoader`: buffers a gradient-accumulation window, adds the
  window's valid-token count to each batch, and checkpoints exactly at every point,
  mid-window included (see `stateful_contract.reference.prefetch`).
- `MindSpeedPrefetchGradAccDataLoader`, `ProposedFixPrefetchGradAccDataLoader`: the seed
  report's MindSpeed-MM wrapper and its proposed fix, kept as known-bad examples (see
  `stateful_contract.reference.mindspeed`).
- `stateful_contract.reference.factories`: ``factory(config) -> loader`` targets for the
  contract (``stateful_dataloader``, ``reference_wrapper``, ``mindspeed_wrapper``,
  ``proposed_fix_wrapper``).
"""

from __future__ import annotations

from stateful_contract.reference.factories import (
    mindspeed_wrapper,
    proposed_fix_wrapper,
    reference_wrapper,
    stateful_dataloader,
)
from stateful_contract.reference.mindspeed import (
    MindSpeedPrefetchGradAccDataLoader,
    ProposedFixPrefetchGradAccDataLoader,
)
from stateful_contract.reference.prefetch import (
    AVG_TOKEN_COUNT_KEY,
    STATE_FORMAT_VERSION,
    WINDOW_TOKEN_COUNT_KEY,
    PrefetchGradAccDataLoader,
    StatefulBaseLoader,
)

__all__ = [
    "AVG_TOKEN_COUNT_KEY",
    "STATE_FORMAT_VERSION",
    "WINDOW_TOKEN_COUNT_KEY",
    "MindSpeedPrefetchGradAccDataLoader",
    "PrefetchGradAccDataLoader",
    "ProposedFixPrefetchGradAccDataLoader",
    "StatefulBaseLoader",
    "mindspeed_wrapper",
    "proposed_fix_wrapper",
    "reference_wrapper",
    "stateful_dataloader",
]
