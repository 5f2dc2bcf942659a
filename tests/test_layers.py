"""The package imports in layers: no module imports, however indirectly, one that imports it,
counting imports inside functions (a circle closed there shows only when the code is read);
the kit's modules import only their own layer and those below it (``LAYERS``, as
``docs/explanation/architecture.md`` lists them); and the public strategies load neither the
reference model nor a coordinator."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The kit's layers, lowest first: a module imports modules of its own layer or a lower one.
#: Every module of ``fakeshard/testing/`` is in one (a new module is placed here, and in the
#: architecture page).
LAYERS: dict[str, set[str]] = {
    "base": {"_trace", "_lengths", "_probes", "_draws", "_damage", "_profiles", "_database", "_http",
             "_http_checks", "strategies"},
    "model": {"_model", "_linearizability"},
    "reference coordinators": {"_reference_coordinator", "_async_coordinator", "coordinator_program"},
    "page": {"_view", "_save"},
    "engine machines": {"_runner", "_machines", "_failover", "_surface", "_parallel", "checks"},
    "coordinator world": {"_sim", "_coordinator_machine", "_concurrent", "_program"},
    "harness": {"_replay", "_history", "_reports", "_registry", "_regress", "_known", "_campaign", "_catalogue",
                "plugin", "suite"},
}
#: The core's modules that run the kit (the command line's ``check`` and ``replay``).
CORE_RUNS_THE_KIT = {"fakeshard._cli", "fakeshard._check"}


def modules(package: Path) -> dict[str, Path]:
    """Every module under ``package`` (a directory), by dotted name."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(package: Path) -> dict[str, set[str]]:
    """Each module's imports of the package's own modules, anywhere in its body: at the top,
    in functions, under ``if TYPE_CHECKING``."""
    known = modules(package)

    def owner(name: str) -> str:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in known else ""

    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        here = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                # ``from package import module`` imports the module; ``from module import name`` the module.
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
            for target in targets:
                hit = owner(target)
                if hit and hit != name:
                    edges[name].add(hit)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``edges``: each a path ``a -> b -> ... -> a`` (one per strongly
    connected group of modules, Tarjan's algorithm), sorted for a stable report."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_path_within(sorted(g)[0], set(g), edges) for g in sorted(groups)]


def _path_within(start: str, group: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest way from ``start`` back to itself inside ``group`` (breadth first)."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v] & group):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came[path[-1]])
                    return [start] + path[::-1][1:] + [start] if v != start else [start, start]
                if w not in came:
                    came[w] = v
                    following.append(w)
        frontier = following
    return [start]


def test_no_module_of_the_package_is_in_an_import_circle():
    found = circles(imports(ROOT / "fakeshard"))
    assert found == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def _layer_of() -> dict[str, int]:
    return {f"fakeshard.testing.{name}": rank for rank, names in enumerate(LAYERS.values()) for name in names}


def test_every_kit_module_has_a_layer_and_imports_none_above_it():
    edges = imports(ROOT / "fakeshard")
    rank = _layer_of()
    kit = {m for m in edges if m.startswith("fakeshard.testing.")}
    assert kit - set(rank) == set(), "place these modules in a layer (LAYERS)"
    assert set(rank) - kit == set(), "LAYERS names modules that do not exist"
    names = list(LAYERS)
    upward = sorted(f"{m} ({names[rank[m]]}) imports {t} ({names[rank[t]]})"
                    for m in kit for t in edges[m] if t in rank and rank[t] > rank[m])
    assert upward == [], "\n".join(upward)


def test_the_core_imports_the_kit_only_where_the_command_line_runs_it():
    edges = imports(ROOT / "fakeshard")
    core = {m for m in edges if m != "fakeshard.testing" and not m.startswith("fakeshard.testing.")}
    reaching = sorted(m for m in core - CORE_RUNS_THE_KIT
                      if any(t == "fakeshard.testing" or t.startswith("fakeshard.testing.") for t in edges[m]))
    assert reaching == []


def test_the_circle_check_finds_a_circle_closed_inside_a_function(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "_record.py").write_text("def keep():\n    from pkg._view import draw\n    return draw\n")
    (package / "_view.py").write_text("from pkg._replay import again\n\ndef draw():\n    return again\n")
    (package / "_replay.py").write_text("from pkg import _record\n\nagain = _record\n")
    (package / "_apart.py").write_text("import pkg._record\n")
    assert circles(imports(package)) == [["pkg._record", "pkg._view", "pkg._replay", "pkg._record"]]
    (package / "_record.py").write_text("def keep(draw):\n    return draw\n")  # the drawing passed in
    assert circles(imports(package)) == []


def test_the_public_strategies_load_neither_the_model_nor_a_coordinator():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fakeshard.testing.strategies; "
                               "print('\\n'.join(m for m in sys.modules if m.startswith('fakeshard')))"],
        capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    assert "fakeshard.testing.strategies" in loaded
    heavy = {"fakeshard.testing._model", "fakeshard.testing._runner", "fakeshard.testing._reference_coordinator",
             "fakeshard.testing._coordinator_machine", "fakeshard.testing._async_coordinator",
             "fakeshard.testing._concurrent", "fakeshard.testing._sim", "fakeshard.testing._program",
             "fakeshard.testing._trace"}
    assert heavy.isdisjoint(loaded), sorted(heavy.intersection(loaded))
