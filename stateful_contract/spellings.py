"""Each option of a check in the words of each face, and the face a check is run from (docs/pytest.md, "The
mixin").

`OPTIONS` is the one table of an option's spellings: its ``check()`` keyword (a `CheckOptions` field), its
command-line flags and help (the CLI's argparse is built from them) and its pytest class attribute. A message
that tells the reader to set an option names it as a `Hint`, data (which option, which value), spelled in
the face the check runs from when the message is written: a hint in another face's words
(``--expect-fail 'SC23=reason'`` to a pytest class) sends the reader to an option they cannot use. The face
is set by the CLI, the distributed commands and the pytest mixin (`speaking`; plain Python otherwise), and
travels as data to the processes the check starts (`current`, kept by the executors' handlers).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["NOT_CARRIED", "OF_ITS_OWN_PROCESSES", "OPTIONS", "SIZE_UNITS", "Face", "Hint", "Option", "current",
           "size_text", "speaking"]

Face = Literal["python", "cli", "pytest"]

#: The face hints are spelled in, and under pytest the qualname of the class the check is for.
_SPEAKER: contextvars.ContextVar[tuple[Face, str]] = contextvars.ContextVar("stateful_contract_face",
                                                                           default=("python", ""))


@contextlib.contextmanager
def speaking(face: Face, owner: str = "") -> Iterator[None]:
    """Spell the hints of the checks run in this block in ``face``'s words (``owner``: the pytest class)."""
    token = _SPEAKER.set((face, owner))
    try:
        yield
    finally:
        _SPEAKER.reset(token)


def current() -> tuple[Face, str]:
    """The face hints are spelled in here, and its pytest class: what a process the check starts is given."""
    return _SPEAKER.get()


@dataclass(frozen=True)
class Option:
    """One option of a check: its ``check()`` keyword, its command-line flags (the long one last) and help."""

    keyword: str
    flags: tuple[str, ...]
    help: str

    @property
    def flag(self) -> str:
        return self.flags[-1]


#: Every option a face offers, by its ``check()`` keyword. The pytest attribute is the keyword (the mixin's
#: ``config_space`` for ``space``, `_ATTRIBUTE`); output and progress flags (``--json``, ``-q``) are the CLI's
#: alone and live there.
OPTIONS: dict[str, Option] = {o.keyword: o for o in (
    Option("profile", ("--profile",), "dev: fast; ci: deterministic (default); thorough: many more examples"),
    Option("clauses", ("--clause",), "run only this clause, by ID or name (repeatable, or comma-separated: "
                                     "SC10,resume-survives-several-hops)"),
    Option("expected_failures", ("--expect-fail",), "declare an expected failure (repeatable)"),
    Option("checkpoint_alignment", ("--checkpoint-alignment",),
           "declare the trainer's checkpoint policy, where the loader must be exact: only at epoch ends (after "
           "StopIteration), at grad-acc window boundaries, or every N batches"),
    Option("epoch_hook", ("--epoch-hook",), "the method the trainer calls with the epoch before each one "
                                            "(default %(default)s; OLMo-core: reshuffle): SC21's loop calls it"),
    Option("space", ("--config-space",),
           "narrow the configuration space searched, as a test class's config_space does: num_workers=0,2 "
           "grad_acc_step=1..8 (also dataset_size, batch_size: LOW..HIGH or one number)"),
    Option("consume", ("--consume",), "the trainer draws batches through FUNCTION(loader) (a preloader, say) and "
                                      "saves loader.state_dict(): check that pair"),
    Option("strict", ("--strict",), "also run the strict tier (SC40, SC41, SC42)"),
    Option("endless", ("--endless",), "declare the loader endless (its passes never end): checked as one stream, "
                                      "and a pass that ends fails (an undeclared endless loader is recognised on "
                                      "its first pass)"),
    Option("world_size", ("--world-size",), "check N ranks on torch.distributed"),
    Option("fixed_global_batch", ("--fixed-global-batch",),
           "declare that the trainer keeps the global batch fixed when the world size changes (per-rank batch = "
           "global / ranks, as OLMo-core and Megatron do): SC31 resumes so"),
    Option("joins_uneven_inputs", ("--joins-uneven-inputs",),
           "declare that the trainer handles ranks with uneven batch counts (DDP's Join): SC32 does not apply"),
    Option("checkpoint_layout", ("--checkpoint-layout",),
           "declare how the trainer saves the loader's state on several ranks (per-rank-files: each rank "
           "torch.saves its own, as MindSpeed-MM): SC30 judges that layout alone"),
    Option("trainer_shape", ("--trainer-shape",),
           "declare what the trainer does with its loader, so that a clause judging only calls it never makes is "
           "not judged: loads-fresh, it loads a checkpoint only into a freshly built loader (SC20 not judged); "
           "iter-then-next, it draws each pass's first batch at once after iter() (no checkpoint drawn between "
           "the two); whole-passes, it runs every pass to its end before its next iter() (SC22 not judged)"),
    Option("timeout", ("--timeout",), "seconds per example (0: none)"),
    Option("run_timeout", ("--run-timeout",), "seconds a multi-rank run may take, start-up included, before every "
                                              "process of it is killed (default: from the profile's budget)"),
    Option("run_dir", ("--run-dir",), "keep a multi-rank run's files here (each rank's states, checkpoints and "
                                      "logs, in DIR/logs)"),
    Option("memory_limit", ("--memory-limit",),
           "memory the loader's processes may gain during one example, e.g. 2G (default %(default)s; 'none')"),
    Option("isolation", ("--in-process",), "run the loader in this process, not a supervised child (for a "
                                           "debugger; a crash then ends the check)"),
    Option("jobs", ("--jobs",), "judge clauses in N parallel processes (default: every core; 1 under pytest-xdist)"),
    Option("exitfirst", ("-x", "--exitfirst"), "stop at the first clause that fails (the likeliest to fail run "
                                               "first); the report names the clauses not run"),
    Option("seed", ("--seed",), "seed the search (the report records it; dev and thorough draw one otherwise)"),
)}

#: The options a printed rerun of a check does not give again, and why. Every other option of `OPTIONS` changes
#: what a check judges (its examples, their limits, the declarations, the verdict on a declared failure), so
#: every line that reruns a check (a multi-rank example's, a crash's, the in-world one's) and a replay of its
#: report give it again when it was set (`stateful_contract.run.options.CheckOptions.carried`): a pasted line
#: that judged under another profile, space or timeout than the run that printed it might not reproduce it.
NOT_CARRIED = {
    "clauses": "a rerun names the clause it runs again",
    "world_size": "a rerun names its world: the one that failed, or its launcher's",
    "run_dir": "where a run keeps its files, not what it judges (a crash's rerun names one to keep them in)",
    "jobs": "the verdicts do not depend on it",
    "exitfirst": "a rerun runs one clause, after what it needs",
}

#: The options of the processes a check starts itself (its ranks, the children it supervises): a check inside
#: a launcher's world (``python -m stateful_contract.distributed run``) runs in the launcher's processes and
#: takes none of them.
OF_ITS_OWN_PROCESSES = ("world_size", "run_timeout", "run_dir", "memory_limit", "isolation", "jobs")

#: The pytest mixin's attribute where it is not the keyword.
_ATTRIBUTE = {"space": "config_space"}

#: A hint's value when the message does not know it ("--timeout sets the limit").
ANY = ...


@dataclass(frozen=True)
class Hint:
    """How to set ``option`` (an `OPTIONS` key) to ``value``, or (``form``) where it is declared or how to drop
    ``value`` from it. ``str()`` spells it in the current face: ``--timeout 30``, ``check(..., timeout=30)``,
    ``timeout = 30 on TestMyLoader``."""

    option: str
    value: object = ANY
    form: Literal["set", "name", "remove"] = "set"

    def __post_init__(self) -> None:
        if self.option not in OPTIONS:
            raise ValueError(f"no option {self.option!r} to hint at (spellings.OPTIONS)")

    def __str__(self) -> str:
        return self.spelled()

    def spelled(self, face: Face | None = None) -> str:
        """This hint in ``face``'s words (the current face by default)."""
        speaker, owner = current()
        return {"cli": self._cli, "python": self._python, "pytest": self._pytest}[face or speaker](owner)

    def _cli(self, owner: str) -> str:
        flag, value = OPTIONS[self.option].flag, self.value
        if self.form == "name":
            return flag
        if self.form == "remove":
            return f"drop {flag} {value}"
        if value is ANY or value is True:
            return "/".join(OPTIONS[self.option].flags)
        if isinstance(value, dict):  # an expected failure: ID=REASON
            return " ".join(f"{flag} {shlex.quote(f'{k}={v}')}" for k, v in value.items())
        if isinstance(value, (tuple, list)):
            return f"{flag} {','.join(map(str, value))}"
        return f"{flag} {shlex.quote(str(value))}"

    def _python(self, owner: str) -> str:
        if self.form == "name":
            return self.option
        if self.form == "remove":
            return f"remove {self.value!r} from {self.option}"
        return f"check(..., {self.option}={_literal(self.value)})"

    def _pytest(self, owner: str) -> str:
        attribute = _ATTRIBUTE.get(self.option, self.option)
        on = owner or "the test class"
        if self.form == "name":
            return f"{owner}.{attribute}" if owner else f"{attribute} on the test class"
        if self.form == "remove":
            return f"remove {self.value!r} from {on}.{attribute}" if owner else \
                f"remove {self.value!r} from {attribute} on the test class"
        if self.option == "clauses":  # a class's clauses are its tests: selected as tests are
            ids = [str(v) for v in (self.value if isinstance(self.value, (tuple, list)) else [self.value])]
            return f"-k {ids[0]}" if len(ids) == 1 else f"-k \"{' or '.join(ids)}\""
        if self.option == "exitfirst":
            return f"pytest -x (or exitfirst = True on {on})"
        return f"{attribute} = {_literal(self.value)} on {on}"


def _literal(value: object) -> str:
    """``value`` as Python source (strings double-quoted, as a user writes them in the docs)."""
    if value is ANY:
        return "..."
    if isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


#: The units a size is written in (``--memory-limit 4G``), each 1024 times the one before.
SIZE_UNITS = " KMGT"


def size_text(size: int) -> str:
    """``4 << 30`` -> ``4G``: the largest unit that writes ``size`` whole (as ``--memory-limit`` reads it back)."""
    power = next(p for p in range(len(SIZE_UNITS) - 1, -1, -1) if size % (1 << (10 * p)) == 0)
    return f"{size >> (10 * power)}{SIZE_UNITS[power].strip()}"
