"""MindSpeed-MM's wrapper, reproduced on purpose with its bugs: known-bad examples.

``mindspeed_mm/fsdp/data/dataloader/dataloader.py::PrefetchGradAccDataLoader`` (master ``852ddffd``), the
bug report against it, its two bugs (SC02, SC10) and the proposed fix that removes the crash only: the
published docs' index.md, "Why: the seed report" (the report itself does not ship). That fix also ignores ``load_state_dict(None)``, silently.
`.prefetch.PrefetchGradAccDataLoader` is the corrected one.

Upstream's: buffering, counting (``> -1``, hard-coded), the average (over the batches actually fetched,
fewer in the short last window), the output keys, ``__iter__`` returning ``self``, the state methods.
Two deliberate differences, neither touching the state bugs: one epoch per ``iter()`` (upstream's
``cyclic=False`` path; its default ``cyclic=True`` is endless, windows spanning epochs), so its stream
compares batch for batch with the base loader's; and the base iterator is created per epoch only
(``cyclic=False`` also creates one in ``__init__``, advancing a shuffling sampler's generator once
more), lazily at the first ``next()`` as the cyclic generator does: ``for batch in iter(loader)``,
which calls ``__iter__`` twice, starts one epoch, not two.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sized
from typing import Any

from stateful_contract.reference.prefetch import (
    AVG_TOKEN_COUNT_KEY,
    WINDOW_TOKEN_COUNT_KEY,
    StatefulBaseLoader,
)

__all__ = ["MindSpeedPrefetchGradAccDataLoader", "ProposedFixPrefetchGradAccDataLoader"]

# Upstream names (mindspeed_mm/fsdp/utils/constants.py).
GLOBAL_STEP_TOKEN_NUM = WINDOW_TOKEN_COUNT_KEY
AVG_PER_STEP_TOKEN_NUM = AVG_TOKEN_COUNT_KEY


class MindSpeedPrefetchGradAccDataLoader:
    """MindSpeed-MM's ``PrefetchGradAccDataLoader`` as of MindSpeed-MM's bug report. KNOWN BAD:
    bugs 1 and 2 of the module docstring."""

    def __init__(self, base_dataloader: StatefulBaseLoader, grad_acc_step: int) -> None:
        if grad_acc_step <= 0:
            raise ValueError("grad_acc_step must be a positive integer.")
        self.grad_acc_step = grad_acc_step
        self.base_dataloader = base_dataloader
        self.base_iter: Iterator[Mapping[str, Any]] | None = None
        self._current_iterator: Generator[dict[str, Any], None, None] | None = None

    def __iter__(self) -> MindSpeedPrefetchGradAccDataLoader:
        # A new iteration; the wrapper is its own iterator, as upstream, and the base iterator is
        # created at the first next() (the module docstring says why).
        self._current_iterator = self._generate_batches()
        return self

    def __len__(self) -> int:
        # Upstream: hasattr(self.base_dataloader, "__len__").
        return len(self.base_dataloader) if isinstance(self.base_dataloader, Sized) else 0

    def __next__(self) -> dict[str, Any]:
        if self._current_iterator is None:
            # Upstream: if __next__ is called before __iter__, start iteration.
            self._current_iterator = self._generate_batches()
        try:
            return next(self._current_iterator)
        except StopIteration:
            self._current_iterator = None  # reset on exhaustion
            raise

    def _generate_batches(self) -> Generator[dict[str, Any], None, None]:
        """Yield batches with the window's token counts injected (upstream's loop)."""
        self.base_iter = base_iter = iter(self.base_dataloader)
        try:
            while True:
                buffer: list[Mapping[str, Any]] = []
                total_tokens: Any = 0
                # Prefetch grad_acc_step batches: from here on the base loader (and so this wrapper's
                # state_dict()) is ahead of what has been yielded.
                try:
                    for _ in range(self.grad_acc_step):
                        batch = next(base_iter)
                        valid_token_count = (batch["labels"] > -1).sum()  # tokens of shift labels
                        total_tokens += valid_token_count
                        buffer.append(batch)
                except StopIteration:
                    # After a short last window the loop comes back here and the exhausted base
                    # iterator raises StopIteration again (torchdata's do).
                    if not buffer:
                        break  # no more data
                avg_tokens = total_tokens / len(buffer)  # upstream counts the fetched batches apart
                for batch in buffer:
                    batch_dict = dict(batch)
                    batch_dict[GLOBAL_STEP_TOKEN_NUM] = total_tokens
                    batch_dict[AVG_PER_STEP_TOKEN_NUM] = avg_tokens
                    yield batch_dict
        finally:
            close = getattr(base_iter, "close", None)
            if callable(close):
                close()

    def state_dict(self) -> dict[str, Any]:
        """BUG 2: the base loader's state, ahead of the wrapper mid-window."""
        return self.base_dataloader.state_dict()

    def load_state_dict(self, **kwargs: Any) -> None:
        """BUG 1: keyword-only; ``load_state_dict(state)`` raises `TypeError`."""
        # mypy flags this very line: the protocol's state_dict is positional-only.
        self.base_dataloader.load_state_dict(**kwargs)  # type: ignore[call-arg]


class ProposedFixPrefetchGradAccDataLoader(MindSpeedPrefetchGradAccDataLoader):
    """The fix proposed in MindSpeed-MM's bug report: positional ``load_state_dict``. STILL BAD
    mid-window: bug 2 is untouched, and ``load_state_dict(None)`` is silently ignored."""

    def load_state_dict(self, state_dict: dict[str, Any] | None = None) -> None:  # type: ignore[override]
        # Positional, as the train_engine caller passes it and the wrapped StatefulDataLoader takes it.
        if state_dict is not None:
            self.base_dataloader.load_state_dict(state_dict)
