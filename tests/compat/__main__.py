"""``python -m tests.compat``: run the compatibility matrix, write docs/compatibility.md."""

from .table import main

raise SystemExit(main())
