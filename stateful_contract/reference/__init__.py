"""Reference loaders: the corrected grad-accumulation wrapper, MindSpeed-MM's broken ones, factories.

`.prefetch` (exact at every point, mid-window included), `.mindspeed` (the seed report's wrapper and its
proposed fix, kept as known-bad examples), `.factories` (targets): docs/architecture.md, "What ships".
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

__all__ = ["AVG_TOKEN_COUNT_KEY", "STATE_FORMAT_VERSION", "WINDOW_TOKEN_COUNT_KEY",
           "MindSpeedPrefetchGradAccDataLoader", "PrefetchGradAccDataLoader",
           "ProposedFixPrefetchGradAccDataLoader", "StatefulBaseLoader", "mindspeed_wrapper",
           "proposed_fix_wrapper", "reference_wrapper", "stateful_dataloader"]
