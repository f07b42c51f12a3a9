"""What a refusal of a worker-count change must say (SC41): the one test of it, which the clause makes and the
reproduction it prints ends in (`assert_names_the_worker_counts`)."""

from __future__ import annotations

import re

__all__ = ["assert_names_the_worker_counts", "names_the_worker_counts"]

#: Words that say a message is about worker processes (``num_workers``), and how a zero count reads.
_WORKER_WORDS = re.compile(r"worker|process", re.IGNORECASE)
_NO_WORKERS = re.compile(r"main process|single[ -]?process|no worker", re.IGNORECASE)


def names_the_worker_counts(error: BaseException, saved: int, resumed: int) -> bool:
    """Whether an exception refuses the state for the worker count: it is about workers (or
    processes) and names both counts (a count of 0 may read "main process", "single-process")."""
    text = f"{type(error).__name__}: {error}"
    if not _WORKER_WORDS.search(text):
        return False
    numbers = set(re.findall(r"\d+", text))
    return all(str(n) in numbers or (n == 0 and bool(_NO_WORKERS.search(text))) for n in (saved, resumed))


def assert_names_the_worker_counts(refusal: BaseException, saved: int, resumed: int) -> None:
    """``refusal`` (the loader's error, or the `LoaderError` a step raised with it) names num_workers ``saved``
    and ``resumed``: else whoever restarts a job with another num_workers is not told why it fails."""
    error = getattr(refusal, "error", refusal)
    assert names_the_worker_counts(error, saved, resumed), (
        f"the refusal ({type(error).__name__}: {error}) does not name num_workers {saved} and {resumed}, e.g. "
        f"ValueError('state saved with num_workers={saved}, this loader has num_workers={resumed}')")
