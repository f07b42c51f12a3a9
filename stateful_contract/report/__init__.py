"""The report: results per clause, their JSON and their text (docs/reports.md). Its public path
`stateful_contract.report` names what `results` defines."""

from .results import *  # noqa: F403
from .results import __all__ as __all__
