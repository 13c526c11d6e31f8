"""The shape of the code, enforced: dependencies point one way and nobody reaches into the manager.

Layers, lowest first (../shared/DESIGN.md): model/errors/config → {embed, index} → engine → services →
api → daemon → shells. A module may import its own layer or a lower one, never a higher one — not at
module level, not inside a function, not under TYPE_CHECKING — and the imports between modules make
no cycle. Outside ``api.py`` nothing touches a private attribute of the MemoryManager.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "remindful"

#: (module prefix, layer); the longest matching prefix decides.
LAYERS: dict[str, int] = {
    "remindful.model": 0,
    "remindful.errors": 0,
    "remindful.config": 0,
    "remindful.config_defaults": 0,
    "remindful.runtime": 0,
    "remindful.embed": 1,
    "remindful.index": 1,
    "remindful.engine": 2,
    "remindful.services": 3,
    "remindful": 4,  # the package itself: open(), lazy re-exports
    "remindful.api": 4,
    "remindful.aio": 4,
    "remindful.testing": 4,
    "remindful.daemon": 5,
    "remindful.web": 5,  # the dashboard app: above the API, served by the daemon and by `remindful dashboard`
    "remindful.shells": 6,
}
LAYER_NAMES = {
    0: "model/errors/config",
    1: "embed/index",
    2: "engine",
    3: "services",
    4: "api",
    5: "daemon",
    6: "shells",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    best = max((prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")), key=len)
    return LAYERS[best]


def imports(path: Path, this: str | None = None) -> Iterator[tuple[str, int]]:
    """Every remindful module ``path`` (module ``this``, by default named from its place in the
    package) imports, anywhere in the file, with the line."""
    this = this or module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "remindful":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if source.split(".")[0] != "remindful":
                continue
            for alias in node.names:  # `from remindful.engine import windows` imports a module
                candidate = f"{source}.{alias.name}"
                yield (candidate if candidate in MODULES else source), node.lineno


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _line in imports(path):
            if target != name:
                graph[name].add(target)
    return graph


def test_every_module_has_a_layer() -> None:
    assert MODULES, "no modules found"
    for name in MODULES:
        assert layer(name) in LAYER_NAMES, name


def test_no_module_imports_a_higher_layer() -> None:
    upward = []
    for name, path in MODULES.items():
        for target, line in imports(path):
            if layer(target) > layer(name):
                upward.append(
                    f"{path.relative_to(ROOT)}:{line}: {name} ({LAYER_NAMES[layer(name)]}) imports "
                    f"{target} ({LAYER_NAMES[layer(target)]})"
                )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_imports_make_no_cycle() -> None:
    graph = edges()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []
    cycles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*stack[stack.index(target) :], target]))
            elif target in graph and not state.get(target):
                visit(target)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if not state.get(name):
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def manager_private_names() -> set[str]:
    """Private attributes and methods of MemoryManager (from api.py), plus the old ``_state``."""
    tree = ast.parse((PACKAGE / "api.py").read_text())
    names = {"_state"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "MemoryManager":
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef) and item.name.startswith("_") and not item.name.startswith("__"):
                    names.add(item.name)
                if (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.value, ast.Name)
                    and item.value.id == "self"
                    and item.attr.startswith("_")
                    and not item.attr.startswith("__")
                ):
                    names.add(item.attr)
    return names


def test_the_manager_has_private_state_to_protect() -> None:
    assert "_store" in manager_private_names()  # the check below would pass vacuously otherwise


@pytest.mark.parametrize("folder", ["src", "tests", "bench"])
def test_nobody_outside_api_touches_the_managers_private_attributes(folder: str) -> None:
    private = manager_private_names()
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path == PACKAGE / "api.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in private:
                # ``self._x`` inside another class is that class's own attribute
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not found, "private MemoryManager attributes used outside api.py:\n" + "\n".join(found)


def test_the_checks_see_an_upward_import(tmp_path: Path) -> None:
    """The walker itself: a function-level import of a service from the engine is found."""
    probe = tmp_path / "_architecture_probe.py"
    probe.write_text("def f():\n    from remindful.services.stats import build_stats\n    return build_stats\n")
    found = list(imports(probe, "remindful.engine._architecture_probe"))
    assert found == [("remindful.services.stats", 2)]
    assert layer("remindful.services.stats") > layer("remindful.engine._architecture_probe")


# -- the Store's private attributes stay inside the engine ----------------------------------------------


def store_private_names() -> set[str]:
    """Private attributes and methods of the engine's Store (from engine/store.py)."""
    tree = ast.parse((PACKAGE / "engine" / "store.py").read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Store":
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef) and item.name.startswith("_") and not item.name.startswith("__"):
                    names.add(item.name)
                if (
                    isinstance(item, ast.Attribute)
                    and isinstance(item.value, ast.Name)
                    and item.value.id == "self"
                    and item.attr.startswith("_")
                    and not item.attr.startswith("__")
                ):
                    names.add(item.attr)
    return names


def store_private_uses(tree: ast.AST, private: set[str]) -> Iterator[tuple[int, str]]:
    """(line, name) of each private attribute of the Store used in ``tree``: one reached through
    the manager's engine or a ``_store`` (``memory.engine._x``), or a name only the Store has
    (``state._size_at`` after ``state = memory.engine``). ``self._x`` is the own class's."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue
        through_engine = isinstance(base, ast.Attribute) and base.attr in ("engine", "_store")
        if through_engine or node.attr in private:
            yield node.lineno, node.attr


def test_the_store_has_private_state_to_protect() -> None:
    assert {"_catalog", "_mirror", "_embedder"} <= store_private_names()  # else the check below passes vacuously


def test_the_check_sees_a_private_attribute_of_the_store() -> None:
    probe = ast.parse("memory.engine._mirror.close()\nstate = memory.engine\nstate._catalog\nmemory.engine.catalog\n")
    assert sorted(store_private_uses(probe, store_private_names())) == [(1, "_mirror"), (3, "_catalog")]


@pytest.mark.parametrize("folder", ["src", "tests", "bench"])
def test_nobody_outside_the_engine_touches_the_stores_private_attributes(folder: str) -> None:
    private = store_private_names()
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path.is_relative_to(PACKAGE / "engine"):
            continue
        for line, name in store_private_uses(ast.parse(path.read_text(), str(path)), private):
            found.append(f"{path.relative_to(ROOT)}:{line}: .{name}")
    assert not found, "private attributes of the Store used outside engine/:\n" + "\n".join(found)
