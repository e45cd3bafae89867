"""No import cycles inside rlcli, and packages that import only from the layers below theirs, read from the
source with ``ast`` (nothing is imported).

Every ``import`` counts, module-level or inside a function: a deferred import hides a cycle from the
first load but not from the design, and the next refactor that hoists it to the top turns it into an
ImportError on a half-initialised module.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_CYCLES_SHOWN = 100

Graph = dict[str, dict[str, tuple[Path, int]]]  # importer -> imported -> (file, line of the first such import)


def package_modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file under ``package_dir``."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def ancestors(module: str) -> list[str]:
    """The packages whose ``__init__`` Python executes before ``module``: ``a.b.c`` -> ``[a, a.b]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _ImportCollector(ast.NodeVisitor):
    """(target, line, explicit) for each module an import statement loads.

    ``explicit`` is False for a package that is loaded only because a submodule of it is: ``import a.b``
    and ``from a import b`` (``b`` a submodule) run ``a/__init__`` without reading anything from it.
    """

    def __init__(self, module: str, is_package: bool, modules: Mapping[str, Path]) -> None:
        self.module, self.is_package, self.modules = module, is_package, modules
        self.found: list[tuple[str, int, bool]] = []

    def visit_If(self, node: ast.If) -> None:
        # `if TYPE_CHECKING:` bodies never run, so they cannot take part in a load-order cycle
        if not is_type_checking(node.test):
            for child in node.body:
                self.visit(child)
        self.visit(node.test)
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._load(alias.name, node.lineno, explicit=True)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node.module, node.level)
        names_a_submodule = [f"{base}.{a.name}" in self.modules for a in node.names]
        for alias, is_submodule in zip(node.names, names_a_submodule, strict=True):
            if is_submodule:
                self._load(f"{base}.{alias.name}", node.lineno, explicit=True)
        # a name that is not a submodule (or `*`) is read from the package's namespace, so the package must
        # have run far enough to define it: the edge behind `from rlcli.cli import app`
        self._load(base, node.lineno, explicit=not all(names_a_submodule))

    def _absolute(self, module: str | None, level: int) -> str:
        if level == 0:
            return module or ""
        # `from . import x` in a package's __init__ means the package itself; in a module, its parent
        parts = self.module.split(".") if self.is_package else self.module.split(".")[:-1]
        parts = parts[: len(parts) - (level - 1)]
        return ".".join(parts + ([module] if module else []))

    def _load(self, target: str, line: int, explicit: bool) -> None:
        for package in ancestors(target):
            self.found.append((package, line, False))
        self.found.append((target, line, explicit))


def import_graph(package_dir: Path) -> Graph:
    """Which package module imports which, with the file and line of the first import of each pair.

    Importing ``p.q.m`` first executes ``p/__init__`` and ``p/q/__init__``; that is a real load-order edge
    from the importer to those packages (``rlcli.share.export -> rlcli.envs`` when it imports
    ``rlcli.envs.atari``), and is counted. It is dropped only where the package is an ancestor of the
    importer: Python starts an ancestor's ``__init__`` before the importer's body runs, so it adds no
    dependency, and counting it would report ``rlcli.envs -> rlcli.envs.gymnasium_backend -> rlcli.envs``
    for every package whose ``__init__`` imports its own submodules. An explicit import of an ancestor
    (``from rlcli.cli import app`` in ``rlcli/cli/train.py``) reads its namespace and is kept.
    """
    modules = package_modules(package_dir)
    graph: Graph = {name: {} for name in modules}
    for name, path in modules.items():
        collector = _ImportCollector(name, path.name == "__init__.py", modules)
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        for target, line, explicit in collector.found:
            # a name resolved to its module: `from rlcli.algos.ppo import PPO` loads rlcli.algos.ppo
            if target not in modules or target == name:
                continue
            if not explicit and target in ancestors(name):
                continue
            if target not in graph[name] or line < graph[name][target][1]:
                graph[name][target] = (path, line)
    return graph


def strongly_connected_components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's components, each sorted, iteratively (no recursion limit); in reverse topological order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        work.append((node, iter(sorted(graph.get(node, ())))))

    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = []
        enter(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    enter(successor)
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def elementary_cycles(graph: Mapping[str, Iterable[str]], limit: int = MAX_CYCLES_SHOWN) -> list[list[str]]:
    """Each simple cycle once, as a closed path ``[a, b, a]`` starting at its smallest node; shortest first.

    At most ``limit``: the number of cycles in a component can grow exponentially with its size.
    """
    cycles: list[list[str]] = []
    for component in strongly_connected_components(graph):
        members = set(component)
        if len(component) == 1 and component[0] not in graph.get(component[0], ()):
            continue
        predecessors: dict[str, set[str]] = {m: set() for m in component}
        for m in component:
            for successor in graph.get(m, ()):
                if successor in members:
                    predecessors[successor].add(m)
        for start in component:  # sorted: a cycle is found only from its smallest member
            if all(p < start for p in predecessors[start]):  # nothing it may still visit leads back to it
                continue
            allowed = {m for m in members if m >= start}
            path, on_path = [start], {start}
            work = [iter(sorted(s for s in graph.get(start, ()) if s in allowed))]
            while work and len(cycles) < limit:
                successor = next(work[-1], None)
                if successor is None:
                    work.pop()
                    on_path.discard(path.pop())
                elif successor == start:
                    cycles.append([*path, start])
                elif successor not in on_path:
                    path.append(successor)
                    on_path.add(successor)
                    work.append(iter(sorted(s for s in graph.get(successor, ()) if s in allowed)))
    return sorted(cycles, key=lambda cycle: (len(cycle), cycle))


def describe(cycle: list[str], graph: Graph) -> str:
    lines = [" -> ".join(cycle)]
    for importer, imported in itertools.pairwise(cycle):
        path, line = graph[importer][imported]
        lines.append(f"    {path.relative_to(ROOT)}:{line}  {importer} imports {imported}")
    return "\n".join(lines)


def test_no_import_cycles_in_the_package():
    graph = import_graph(ROOT / "rlcli")
    cycles = elementary_cycles(graph)
    shown = "" if len(cycles) < MAX_CYCLES_SHOWN else f" (the first {MAX_CYCLES_SHOWN})"
    assert not cycles, f"{len(cycles)} import cycles{shown}:\n" + "\n".join(describe(c, graph) for c in cycles)


# rlcli's parts from the bottom up (docs/layout.md): each imports only from those in the rows before its own
# (``__init__``, rlcli's own, holds the version alone)
LAYERS = (
    ("__init__",), ("errors",), ("config",), ("jobs", "envs"), ("nets",), ("algos",), ("runs",),
    ("training",), ("share",), ("benchmark",), ("tune",), ("cli",), ("__main__",),
)


def part_of(module: str) -> str:
    """``rlcli.training.train`` -> ``training``; ``rlcli`` itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_packages_import_only_from_the_layers_below():
    graph = import_graph(ROOT / "rlcli")
    layer = {part: level for level, parts in enumerate(LAYERS) for part in parts}
    parts = {part_of(module) for module in graph}
    assert parts <= set(layer), f"parts missing from LAYERS (and docs/layout.md): {sorted(parts - set(layer))}"
    upward = [f"{path.relative_to(ROOT)}:{line}  {importer} imports {imported}"
              for importer, targets in graph.items() for imported, (path, line) in targets.items()
              if part_of(importer) != part_of(imported) and layer[part_of(imported)] >= layer[part_of(importer)]]
    assert not upward, "imports from a layer not below the importer's:\n" + "\n".join(upward)


def test_cycle_finder_on_a_synthetic_graph():
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"},  # a three-cycle with an exit
        "d": {"e"}, "e": {"d"},                    # a two-cycle reached from it
        "f": {"f"},                                # a self-loop
        "g": {"a"},                                # leads into a cycle without being in one
        "h": {"i", "j"}, "i": {"h"}, "j": {"h"},   # two cycles sharing h
    }
    components = strongly_connected_components(graph)
    assert sorted(components) == [["a", "b", "c"], ["d", "e"], ["f"], ["g"], ["h", "i", "j"]]
    assert elementary_cycles(graph) == [["f", "f"], ["d", "e", "d"], ["h", "i", "h"], ["h", "j", "h"],
                                        ["a", "b", "c", "a"]]
    assert elementary_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_cycle_finder_is_not_limited_by_recursion_depth():
    n = 5000  # deeper than Python's default recursion limit of 1000
    ring = {f"m{i:05d}": {f"m{(i + 1) % n:05d}"} for i in range(n)}
    assert [len(c) for c in strongly_connected_components(ring)] == [n]
    (cycle,) = elementary_cycles(ring)
    assert len(cycle) == n + 1 and cycle[0] == cycle[-1] == "m00000"


def test_import_resolution_on_a_synthetic_package(tmp_path):
    files = {
        "pkg/__init__.py": "from . import a\n",
        "pkg/a.py": "import os\nfrom pkg.sub import helper\n",
        "pkg/sub/__init__.py": "helper = 1\n",
        "pkg/sub/b.py": (
            "from typing import TYPE_CHECKING\n"
            "from pkg.sub import helper\n"            # a name from its own package: explicit, kept
            "if TYPE_CHECKING:\n"
            "    from pkg import d\n"                 # never runs: not an edge
            "else:\n"
            "    import pkg.sub.c as c\n"
            "def f():\n"
            "    from ..a import x\n"                 # inside a function, relative
        ),
        "pkg/sub/c.py": "from pkg import a\n",      # a submodule: pkg/__init__ runs, but before c anyway
        "pkg/d.py": "from pkg.sub import c\nfrom .sub.c import y\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path / "pkg")
    edges = {(importer, imported, graph[importer][imported][1])
             for importer in graph for imported in graph[importer]}
    assert edges == {
        ("pkg", "pkg.a", 1),
        ("pkg.a", "pkg.sub", 2),
        ("pkg.sub.b", "pkg.sub", 2), ("pkg.sub.b", "pkg.sub.c", 6), ("pkg.sub.b", "pkg.a", 8),
        ("pkg.sub.c", "pkg.a", 1),
        ("pkg.d", "pkg.sub", 1), ("pkg.d", "pkg.sub.c", 1),  # pkg.sub: not an ancestor of pkg.d, so counted
    }
    # pkg.a and pkg.sub.c load pkg only as the parent of what they import, which Python has already begun by
    # then: counted, it would report pkg -> pkg.a -> pkg
    assert elementary_cycles(graph) == []
