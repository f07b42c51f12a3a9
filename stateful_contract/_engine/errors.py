"""The exceptions a step ends with: the loader raised, a pass looked endless, a clause cannot be judged.

Kept apart from the steps themselves (`stateful_contract._engine.steps`, which re-exports them), so
that the engine's modules that only need to tell these apart import nothing else.
"""

from __future__ import annotations

from ..config import LoaderConfig

__all__ = ["EndlessPass", "LoaderError", "NotJudgeable", "pass_limit"]


class NotJudgeable(Exception):
    """The clause cannot be judged for this loader; the message points at the clause that can."""


class EndlessPass(Exception):
    """One pass over the loader went on far past what the config's dataset can make.

    Raised where the contract iterates a pass to its end. Without it an endless loader
    (one that cycles over or repeats its data) would be reported, after the example
    timeout and in every clause, as a loader that hung.
    """

    def __init__(self, batches: int, config: LoaderConfig) -> None:
        limit = pass_limit(config)
        tokens = config.dataset_size * config.seq_len
        super().__init__(
            f"one pass over the loader yielded {batches} batches and had not raised StopIteration; one epoch "
            f"of the config's dataset (dataset_size={config.dataset_size} samples of seq_len={config.seq_len}) "
            f"holds {tokens} tokens, so no pass over it comes near {limit} batches: the loader looks endless "
            "(it cycles over its data, or repeats it). The contract compares epochs, as StatefulDataLoader "
            "ends them: build the factory's loader over one pass of config.dataset (for example "
            "infinite=False, or no .repeat() or itertools.cycle)")
        self.batches = batches
        self.limit = limit


def pass_limit(config: LoaderConfig) -> int:
    """The most batches one pass of a loader on ``config`` may yield before it is called endless.

    Every batch holds at least one token of one sample, so no pass over the config's samples
    has more than ``dataset_size * seq_len`` batches; four times that (and at least 64) leaves
    room for wrappers that split batches and costs milliseconds to reach.
    """
    return max(64, 4 * config.dataset_size * config.seq_len)


class LoaderError(Exception):
    """Code of the loader under test raised; ``step`` says what the contract was doing."""

    #: Batches the `stream` it ended had yielded before it (None: raised outside a stream): a
    #: refusal comes before the first batch (SC23, SC31).
    batches_before: int | None = None

    def __init__(self, step: str, error: BaseException) -> None:
        super().__init__(f"{step} raised {type(error).__name__}: {error}")
        self.step = step
        self.error = error
