"""The shape of gateway/ and agent/ in figures: ``python -m tests.layering_figures``.

Each first-level sub-package and each top-level file of a layer is one unit; an arrow is one unit
importing another (counted once per pair, ``if TYPE_CHECKING:`` imports included: a type import is a
dependency a reader follows too). The figures say how far a layer is from floors:

- units in package circles: the units of each strongly connected set of more than one unit;
- upward arrows: the arrows that point against the best floor order found (the Eades–Lin–Smyth
  heuristic for a feedback arc set: removing them leaves no circle, so they are an upper bound of the
  fewest arrows that must turn round);
- total arrows, and the modules that import the Services or Runtime bag.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.house.test_layering import HERALD, ROOT, imports, module_name, modules, strongly_connected
from tests.source_trees import parsed

LAYERS = ("gateway", "agent")
BAGS = {"gateway.wiring.services": "Services", "gateway.wiring.runtime": "Runtime"}


def unit(module: str, layer: str) -> str | None:
    """The unit of ``layer`` a module belongs to (``cron/``, ``services.py``), or None outside it."""
    parts = module.split(".")
    if parts[0] != layer or len(parts) < 2:
        return None
    return f"{parts[1]}/" if (ROOT / layer / parts[1]).is_dir() else f"{parts[1]}.py"


def known_modules() -> dict[str, Path]:
    return {module_name(path): path for package in HERALD for path in modules(package)}


def resolved(name: str, known: set[str]) -> str | None:
    """``name`` as a Herald module: a ``from package import Name`` names the package."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def unit_arrows(layer: str) -> set[tuple[str, str]]:
    """Every (importer, imported) pair of distinct units of ``layer``."""
    paths = known_modules()
    arrows: set[tuple[str, str]] = set()
    for name, path in paths.items():
        source = unit(name, layer)
        if source is None:
            continue
        for imported in imports(path):
            module = resolved(imported, set(paths))
            target = unit(module, layer) if module else None
            if target and target != source:
                arrows.add((source, target))
    return arrows


def floor_order(arrows: set[tuple[str, str]]) -> list[str]:
    """Units from the top floor down (Eades–Lin–Smyth): sinks go to the bottom, sources to the top,
    and inside a circle the unit with the most arrows out over arrows in goes up first."""
    out: dict[str, set[str]] = {}
    into: dict[str, set[str]] = {}
    for source, target in arrows:
        out.setdefault(source, set()).add(target)
        into.setdefault(target, set()).add(source)
    left = set(out) | set(into)
    top: list[str] = []
    bottom: list[str] = []

    def balance(name: str) -> int:
        return len(out.get(name, set()) & left) - len(into.get(name, set()) & left)

    while left:
        moved = True
        while moved:
            moved = False
            for name in sorted(left):
                if not out.get(name, set()) & left:
                    bottom.insert(0, name)
                    left.discard(name)
                    moved = True
            for name in sorted(left):
                if not into.get(name, set()) & left:
                    top.append(name)
                    left.discard(name)
                    moved = True
        if left:
            name = max(sorted(left), key=balance)
            top.append(name)
            left.discard(name)
    return top + bottom


def upward(arrows: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """The arrows that point up the floor order (from a lower unit to a higher one)."""
    height = {name: position for position, name in enumerate(floor_order(arrows))}
    return sorted((source, target) for source, target in arrows if height[target] < height[source])


def package_circles(arrows: set[tuple[str, str]]) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for source, target in arrows:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    return sorted(sorted(component) for component in strongly_connected(graph) if len(component) > 1)


def bag_importers() -> list[str]:
    """The modules (outside the bags' own) that import the Services or Runtime class."""
    found = []
    for name, path in known_modules().items():
        if name in BAGS:
            continue
        for node in ast.walk(parsed(path)):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module in BAGS
                and any(alias.name == BAGS[node.module] for alias in node.names)
            ):
                found.append(str(path.relative_to(ROOT)))
                break
    return sorted(found)


@dataclass(frozen=True)
class Figures:
    layer: str
    circles: list[list[str]]
    upward: list[tuple[str, str]]
    arrows: int


def figures(layer: str) -> Figures:
    arrows = unit_arrows(layer)
    return Figures(layer, package_circles(arrows), upward(arrows), len(arrows))


def report() -> str:
    lines = []
    for layer in LAYERS:
        shape = figures(layer)
        in_circles = sum(len(circle) for circle in shape.circles)
        lines.append(
            f"{layer}/: {in_circles} units in package circles, "
            f"{len(shape.upward)} upward arrows, {shape.arrows} arrows in all"
        )
        lines.extend(f"  circle: {' '.join(circle)}" for circle in shape.circles)
        lines.extend(f"  upward: {source} -> {target}" for source, target in shape.upward)
    importers = bag_importers()
    lines.append(f"importers of Services/Runtime: {len(importers)}")
    lines.extend(f"  {path}" for path in importers)
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
