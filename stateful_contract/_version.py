"""The package version, written once: setuptools reads it for the metadata, ``__init__`` re-exports it.

A literal and nothing else: setuptools' ``attr:`` reads it from this file's syntax tree
without importing the package (so without torch).
"""

__version__ = "0.1.0"
