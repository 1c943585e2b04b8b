"""Herald's own Python files parsed once per test process: the house rules (layering, dependencies)
read the same few hundred files test after test, and parsing them is most of their time."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree (keyed by its text: a file a test writes is parsed as it is now)."""
    return _parse(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _parse(source: str, filename: str) -> ast.Module:
    return ast.parse(source, filename=filename)
