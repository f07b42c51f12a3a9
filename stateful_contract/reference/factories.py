"""Loader factories for the contract: ``factory(config) -> fresh loader``, targets of the CLI and the
pytest face as ``stateful_contract.reference.factories:NAME``.

Each builds a new loader on every call from ``config.stateful_dataloader()`` (torchdata's
``StatefulDataLoader`` for the config); the contract seeds torch's global RNG with ``config.seed``
right before each call, because a default-generator shuffling sampler seeds itself from it.
"""

from __future__ import annotations

from typing import Any

from stateful_contract.config import LoaderConfig
from stateful_contract.reference.mindspeed import (
    MindSpeedPrefetchGradAccDataLoader,
    ProposedFixPrefetchGradAccDataLoader,
)
from stateful_contract.reference.prefetch import PrefetchGradAccDataLoader

__all__ = ["cyclic_reference_wrapper", "mindspeed_wrapper", "proposed_fix_wrapper", "reference_wrapper",
           "stateful_dataloader"]


def stateful_dataloader(config: LoaderConfig) -> Any:
    """torchdata's ``StatefulDataLoader`` for `config` (ignores ``grad_acc_step``): the baseline."""
    return config.stateful_dataloader()


def reference_wrapper(config: LoaderConfig) -> PrefetchGradAccDataLoader:
    """The corrected gradient-accumulation wrapper around the config's base loader: exact everywhere."""
    return PrefetchGradAccDataLoader(config.stateful_dataloader(), config.grad_acc_step)


def cyclic_reference_wrapper(config: LoaderConfig) -> PrefetchGradAccDataLoader:
    """The corrected wrapper in cyclic mode (MindSpeed-MM's default): one endless ``iter()``, windows spanning
    epochs, exact everywhere."""
    return PrefetchGradAccDataLoader(config.stateful_dataloader(), config.grad_acc_step, cyclic=True)


def mindspeed_wrapper(config: LoaderConfig) -> MindSpeedPrefetchGradAccDataLoader:
    """MindSpeed-MM's wrapper as in MindSpeed-MM's bug report (keyword-only load, base state)."""
    return MindSpeedPrefetchGradAccDataLoader(config.stateful_dataloader(), config.grad_acc_step)


def proposed_fix_wrapper(config: LoaderConfig) -> ProposedFixPrefetchGradAccDataLoader:
    """The fix proposed in MindSpeed-MM's bug report (positional load, still the base state)."""
    return ProposedFixPrefetchGradAccDataLoader(config.stateful_dataloader(), config.grad_acc_step)

