"""flashcheck's reports: figures, index.html and summary.md drawn from JSON Lines records only.

The records are what `flashcheck experiment` and `flashcheck report` write (schema in
shared DESIGN.md: one object per measured case). Nothing here imports or runs C++ code.
"""

from .render import render

__all__ = ["render"]
