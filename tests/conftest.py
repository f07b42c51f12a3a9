"""Test-suite plumbing: the zoo of broken loaders is imported as a plain module."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
