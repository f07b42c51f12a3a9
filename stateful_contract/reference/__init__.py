"""Reference loaders: the corrected grad-accumulation wrapper, the seed's broken ones, factories.

- `PrefetchGradAccDataLoader`: buffers a gradient-accumulation window, adds the
  window's valid-token count to each batch, and checkpoints exactly at every point,
  mid-window included (see `stateful_contract.reference.prefetch`).
- `SeedPrefetchGradAccDataLoader`, `SeedFixPrefetchGradAccDataLoader`: the seed
  report's MindSpeed-MM wrapper and its proposed fix, kept as known-bad examples (see
  `stateful_contract.reference.seed`).
- `stateful_contract.reference.factories`: ``factory(config) -> loader`` targets for the
  contract (``stateful_dataloader``, ``reference_wrapper``, ``seed_wrapper``,
  ``seed_fix_wrapper``).
"""

from __future__ import annotations

from stateful_contract.reference.factories import (
    reference_wrapper,
    seed_fix_wrapper,
    seed_wrapper,
    stateful_dataloader,
)
from stateful_contract.reference.prefetch import (
    AVG_TOKEN_COUNT_KEY,
    STATE_FORMAT_VERSION,
    WINDOW_TOKEN_COUNT_KEY,
    PrefetchGradAccDataLoader,
    StatefulBaseLoader,
)
from stateful_contract.reference.seed import (
    SeedFixPrefetchGradAccDataLoader,
    SeedPrefetchGradAccDataLoader,
)

__all__ = [
    "AVG_TOKEN_COUNT_KEY",
    "STATE_FORMAT_VERSION",
    "WINDOW_TOKEN_COUNT_KEY",
    "PrefetchGradAccDataLoader",
    "SeedFixPrefetchGradAccDataLoader",
    "SeedPrefetchGradAccDataLoader",
    "StatefulBaseLoader",
    "reference_wrapper",
    "seed_fix_wrapper",
    "seed_wrapper",
    "stateful_dataloader",
]
