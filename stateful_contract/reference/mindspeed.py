"""MindSpeed-MM's wrapper, reproduced on purpose with its bugs: known-bad examples.

MindSpeed-MM's bug report (``seed/000_418544c3f3dcb82f.txt``, MindSpeed-MM master ``852ddffd``)
is about ``mindspeed_mm/fsdp/data/dataloader/dataloader.py::PrefetchGradAccDataLoader``,
which MindSpeed-MM puts around its base ``StatefulDataLoader`` when
``loss_cfg.loss_type == "per_token_loss"``. It buffers ``grad_acc_step`` micro-batches,
counts their valid tokens (``(batch["labels"] > -1).sum()``), and yields each buffered
batch as a new dict carrying the window total (``global_step_token_num``) and the
per-micro-batch average (``avg_per_step_token_num``). Its state methods are::

    def state_dict(self):
        return self.base_dataloader.state_dict()

    def load_state_dict(self, **kwargs):
        # mypy flags this very line: the protocol's state_dict is positional-only.
        self.base_dataloader.load_state_dict(**kwargs)  # type: ignore[call-arg]

Bug 1 (the crash the report is about): ``load_state_dict`` is keyword-only, and the
trainer calls ``self.train_dataloader.load_state_dict(state["extra_state"]["train_dataloader"])``
positionally, so every per-token-loss resume dies on all ranks with
``TypeError: ...load_state_dict() takes 1 positional argument but 2 were given``.
`MindSpeedPrefetchGradAccDataLoader` reproduces it.

Bug 2 (behind the crash): the state is the *base* loader's, and the base loader is ahead
of the wrapper by the un-yielded rest of the buffered window. A checkpoint taken after
``k`` batches of a window (``0 < k < window length``) resumes at the next window: the
window's remaining batches are lost (and, position by position, the resumed stream
carries other batches with other window token counts). Only at window boundaries is the
base state the wrapper's position. The report's proposed fix,
``def load_state_dict(self, state_dict=None)`` forwarding a non-``None`` state, removes
the crash only; `ProposedFixPrefetchGradAccDataLoader` reproduces it: exact at window
boundaries (where MindSpeed-MM's trainer happens to checkpoint), wrong mid-window, and
``load_state_dict(None)`` is silently ignored.

`stateful_contract.reference.PrefetchGradAccDataLoader` is the corrected wrapper.

Faithfulness notes. Buffering, counting (``> -1``, hard-coded as upstream), the average
(divided by the batches actually fetched, as the current upstream does for the short
last window), the output keys, the ``__iter__``-returns-``self`` iterator protocol and
the two state methods are upstream's. Two deliberate differences, neither touching the
state bugs: upstream defaults to ``cyclic=True`` (an endless iterator over epochs, in
which windows may span epochs); this reproduction is one epoch per ``iter()``, like
upstream's ``cyclic=False`` path, so that its stream is comparable batch for batch with
the base loader's and the reference wrapper's. And the base iterator is created per
epoch only (upstream's ``cyclic=False`` also creates one in ``__init__``, which
advances a shuffling sampler's generator once more and so changes the stream), and
lazily, at the first ``next()``, as upstream's default cyclic generator does: so
``for batch in iter(loader)``, which calls ``__iter__`` twice, starts one epoch, not two.
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
    """MindSpeed-MM's ``PrefetchGradAccDataLoader`` as of MindSpeed-MM's bug report. KNOWN BAD.

    Crashes on a positional ``load_state_dict(state)`` (bug 1) and, through the keyword
    form ``load_state_dict(state_dict=state)``, loses the rest of the window when resumed
    from a mid-window checkpoint (bug 2). See the module docstring.
    """

    def __init__(self, base_dataloader: StatefulBaseLoader, grad_acc_step: int) -> None:
        if grad_acc_step <= 0:
            raise ValueError("grad_acc_step must be a positive integer.")
        self.grad_acc_step = grad_acc_step
        self.base_dataloader = base_dataloader
        self.base_iter: Iterator[Mapping[str, Any]] | None = None
        self._current_iterator: Generator[dict[str, Any], None, None] | None = None

    def __iter__(self) -> MindSpeedPrefetchGradAccDataLoader:
        # Start a new iteration (reset state); the wrapper is its own iterator, as upstream.
        # As with upstream's default cyclic iterator, the base iterator is only created at
        # the first next(), so `for b in iter(loader)` (a second __iter__) restarts nothing.
        self._current_iterator = self._generate_batches()
        return self

    def __len__(self) -> int:
        if isinstance(self.base_dataloader, Sized):  # upstream: hasattr(..., "__len__")
            return len(self.base_dataloader)
        return 0

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
                fetched = 0
                # Prefetch grad_acc_step batches: from here on the base loader (and so
                # this wrapper's state_dict()) is ahead of what has been yielded.
                try:
                    for _ in range(self.grad_acc_step):
                        batch = next(base_iter)
                        valid_token_count = (batch["labels"] > -1).sum()  # tokens of shift labels
                        total_tokens += valid_token_count
                        buffer.append(batch)
                        fetched += 1
                except StopIteration:
                    # After a short last window the loop comes back here and the
                    # exhausted base iterator raises StopIteration again (torchdata's do).
                    if fetched == 0:
                        break  # no more data
                denom = fetched if fetched > 0 else self.grad_acc_step
                avg_tokens = total_tokens / denom
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
        state: dict[str, Any] = self.base_dataloader.state_dict()
        return state

    def load_state_dict(self, **kwargs: Any) -> None:
        """BUG 1: keyword-only; ``load_state_dict(state)`` raises `TypeError`."""
        # mypy flags this very line: the protocol's state_dict is positional-only.
        self.base_dataloader.load_state_dict(**kwargs)  # type: ignore[call-arg]


class ProposedFixPrefetchGradAccDataLoader(MindSpeedPrefetchGradAccDataLoader):
    """The fix proposed in MindSpeed-MM's bug report: positional ``load_state_dict``. STILL BAD mid-window.

    Resumes exactly only from checkpoints at window boundaries; a mid-window checkpoint
    loses the rest of the window (bug 2 is untouched), and ``load_state_dict(None)`` is
    silently ignored.
    """

    def load_state_dict(self, state_dict: dict[str, Any] | None = None) -> None:  # type: ignore[override]
        # Accept a positional state_dict (the train_engine caller passes it
        # positionally). Forward to the wrapped StatefulDataLoader which also
        # takes a single positional state_dict argument.
        if state_dict is not None:
            self.base_dataloader.load_state_dict(state_dict)
