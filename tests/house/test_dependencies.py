"""Every package Herald's code imports is declared in pyproject.toml.

A package that arrives only as another package's dependency can vanish with that package's next
release, and its type stubs are never installed: on a fresh machine mypy failed on `regex`, which came
only through `dateparser`. Product code (agent, gateway, adapters, resilience) may import only what
`[project].dependencies` names, or a feature's extra (`browser`: imported lazily, and the feature says
what to install when it is missing); tests and benchmarks may also import the `test` extra.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from tests.source_trees import parsed

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "gateway", "adapters", "resilience")
SUPPORT = ("tests", "benchmarks")
OWN = frozenset(PRODUCT + SUPPORT)


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    """`slack_sdk>=3.33,<4` -> `slack-sdk`; `SQLAlchemy[asyncio]>=2.0` -> `sqlalchemy`."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert found, f"cannot read the requirement {requirement!r}"
    return canonical(found.group(1))


@functools.cache
def imported_top_levels(folders: tuple[str, ...]) -> dict[str, str]:
    """Each third-party top-level module imported under `folders`, with one file that imports it."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = parsed(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.partition(".")[0]
                    if top in sys.stdlib_module_names or top in OWN or top == "__future__":
                        continue
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


@functools.cache
def providers() -> dict[str, list[str]]:
    """Top-level module -> the distributions installing it (reading every installed package's file
    list takes seconds: once per run)."""
    return dict(importlib.metadata.packages_distributions())


def undeclared(folders: tuple[str, ...], declared: set[str]) -> list[str]:
    missing = []
    for module, where in sorted(imported_top_levels(folders).items()):
        distributions = {canonical(name) for name in providers().get(module, [])}
        if not distributions:
            missing.append(f"{module} (imported by {where}) is installed by no package")
        elif not distributions & declared:
            missing.append(f"{module} (imported by {where}) comes from {sorted(distributions)}, not declared")
    return missing


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
RUNTIME = {requirement_name(r) for r in PROJECT["dependencies"]}
TEST = {requirement_name(r) for r in PROJECT["optional-dependencies"]["test"]}
# A feature's extra (`herald[browser]`): its imports are lazy, and the feature says what to install when
# they are missing (the browser tool set, `herald doctor`).
FEATURES = {
    requirement_name(r)
    for extra, requirements in PROJECT["optional-dependencies"].items()
    if extra != "test"
    for r in requirements
}


def test_product_code_imports_only_declared_dependencies() -> None:
    assert undeclared(PRODUCT, RUNTIME | FEATURES) == []


def test_tests_and_benchmarks_import_only_declared_dependencies() -> None:
    assert undeclared(SUPPORT, RUNTIME | TEST) == []


def test_the_check_sees_an_undeclared_import() -> None:
    """The scan itself works: `regex` counts as undeclared when the declarations leave it out."""
    assert "regex" in imported_top_levels(PRODUCT)
    assert any(line.startswith("regex ") for line in undeclared(PRODUCT, RUNTIME - {"regex"}))
