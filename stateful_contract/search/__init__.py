"""The search: plans drawn from an uninterrupted run, one example at a time, the loop that drives an executor, what it covered and the failures it saved (docs/architecture.md)."""
