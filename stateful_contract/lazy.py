"""A package whose public names are imported on first use (PEP 562's module ``__getattr__``).

The package's top and `stateful_contract.repro` both re-export names defined in their submodules without
importing those submodules up front: the pytest plugin is loaded in every pytest run where this package is
installed and must not import torch there, and a module that needs one part of the scenario language (the
report needs `repro.impact`) must not import all of it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, namespace: dict[str, Any],
                 exports: Iterable[tuple[str, Iterable[str]]]) -> tuple[dict[str, str], Callable[[str], Any],
                                                                         Callable[[], list[str]]]:
    """For ``package`` (its ``__name__``, its ``globals()``), with ``exports`` as pairs of a module relative
    to the package (``".steps"``, ``"..config"``) and the public names it defines: the table name -> module,
    and the ``__getattr__`` and ``__dir__`` that import a name's module on first use and keep the name."""
    table = {name: module for module, names in exports for name in names}

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name], package), name)
        namespace[name] = value  # found by the ordinary lookup from now on
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *table])

    return table, __getattr__, __dir__
