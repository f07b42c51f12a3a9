"""One check: its options, the clause loop, parallel jobs (docs/architecture.md)."""
