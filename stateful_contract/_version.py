"""The package version, written once: a literal that setuptools' ``attr:`` reads from this file's
syntax tree without importing the package (so without torch); ``__init__`` re-exports it."""

__version__ = "0.1.0"
