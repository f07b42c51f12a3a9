"""Iterable datasets for the StatefulDataLoader matrix (`stateful_contract.reference.matrix`).

The config's samples as an iterable dataset, sharded over worker processes, with and
without a ``state_dict`` of its own: the datasets `LoaderConfig.iterable_dataset()` builds
(`stateful_contract.iterables`), under the names the matrix entries have always used.
"""

from __future__ import annotations

from stateful_contract.iterables import StatefulTokenIterable as StatefulShardedTokens
from stateful_contract.iterables import TokenIterable as ShardedTokens

__all__ = ["ShardedTokens", "StatefulShardedTokens"]
