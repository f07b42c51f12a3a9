"""`python -m stateful_contract.distributed`: the in-world mode's command line."""

from ..faces.distributed.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
