"""Where a loader's process runs: in this process, supervised in a child, or on ranks; and how a process finds the user's factory (docs/supervision.md, docs/distributed.md)."""
