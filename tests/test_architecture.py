"""The shape of the code, enforced: dependencies point one way and nobody reaches into the manager.

Layers, lowest first (../shared/DESIGN.md): model/errors/config → {embed, index} → engine → services →
api → daemon → shells. A module may import its own layer or a lower one, never a higher one — not at
module level, not inside a function, not under TYPE_CHECKING — and the imports between modules make
no cycle, nor do the imports between packages. Outside ``api.py`` nothing touches a private
attribute of the MemoryManager.

The catalog is reached through the engine only: no SQL statement and no ``import sqlite3`` outside
``engine/``, and only the engine and the root hold the Catalog, whose ``read``/``write`` run raw SQL
(the services ask the named methods of :mod:`remindful.engine.repositories`); no service
takes the whole Store (each declares the narrow protocol it uses), and the store's parts (Store,
Catalog, indexes, embedders) are built only by the composition root, ``api.py``.
"""

from __future__ import annotations

import ast
import re
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
    "remindful.config_sources": 0,
    "remindful.runtime": 0,
    "remindful.owned": 0,
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


def package_of(module: str) -> str:
    """The package a module belongs to: a package's ``__init__`` is the package itself; a module of
    ``remindful/`` itself (api, config, daemon...) is a unit of its own, the top of the tree being
    layers rather than one package."""
    if MODULES[module].name == "__init__.py":
        return module
    parent = module.rpartition(".")[0]
    return module if parent == "remindful" else parent


def reexports(path: Path) -> Iterator[str]:
    """Modules an ``__init__.py`` names in strings (a lazy re-export table such as
    ``{"MemoryManager": "remindful.api"}``, imported on first access)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for candidate in (node.value, node.value.rpartition(".")[0]):
                if candidate in MODULES:
                    yield candidate
                    break


def nested(one: str, other: str) -> bool:
    """Whether one package holds the other (``remindful.engine`` and ``remindful.engine.retrieval``)."""
    return one.startswith(other + ".") or other.startswith(one + ".")


def package_edges() -> dict[str, set[str]]:
    """Package → packages its modules import, ``__init__`` re-exports (imports and lazy tables) included.
    A package and the packages it holds are one idea split by sub-idea (the engine's ``retrieval/``
    ranks over the engine's catalog rows, and the engine's Store calls it): their edges are left out,
    so the cycles found are between packages that are not part of each other."""
    graph: dict[str, set[str]] = {}
    for name, targets in edges().items():
        if MODULES[name].name == "__init__.py":
            targets = targets | set(reexports(MODULES[name]))
        source = package_of(name)
        graph.setdefault(source, set())
        for target in targets:
            if target in MODULES and package_of(target) != source and not nested(source, package_of(target)):
                graph[source].add(package_of(target))
    return graph


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_packages_make_no_cycle() -> None:
    """Two packages that import each other are one idea split in two, or two ideas tangled (the
    capture and hooks packages were, through the spool, until issue 25 made them one)."""
    graph = package_edges()
    assert "remindful.services.ingest" in graph["remindful.shells.hook"]  # the walk sees packages
    found = []
    for component in cycles_of(graph):
        members = set(component)
        links = [
            f"  {module} -> {target}"
            for module, targets in sorted(edges().items())
            if package_of(module) in members
            for target in sorted(targets)
            if target in MODULES and package_of(target) in members and package_of(target) != package_of(module)
        ]
        found.append(" <-> ".join(component) + "\n" + "\n".join(links))
    assert not found, "package cycles:\n" + "\n".join(found)


def test_the_package_cycle_check_sees_a_cycle_through_a_reexport(tmp_path: Path) -> None:
    """The checks themselves: a cycle closed by an ``__init__``'s lazy re-export table is found."""
    probe = tmp_path / "__init__.py"
    probe.write_text('_LAZY = {"drain": "remindful.services.ingest.drainer"}\n')
    assert list(reexports(probe)) == ["remindful.services.ingest.drainer"]
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles_of(graph) == [["a", "b", "c"]]
    assert cycles_of({"a": {"b"}, "b": set()}) == []


def private_names(module: Path, class_name: str) -> set[str]:
    """Private methods of the class ``class_name`` in ``module`` and the private attributes it sets
    or reads on ``self``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
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


def manager_private_names() -> set[str]:
    """Private attributes and methods of MemoryManager (from api.py), plus the old ``_state``."""
    return private_names(PACKAGE / "api.py", "MemoryManager") | {"_state"}


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


# -- the catalog behind the engine, one composition root ---------------------------------------------

#: Outside the engine, and not the catalog: Chroma's own SQLite file, probed before chromadb opens it,
#: and given back its free pages after chromadb closed it.
NOT_THE_CATALOG = ("index/chroma_probe.py", "index/chroma_sqlite.py")
#: The hook's context fallback (``hook_context``) opens a bare Store when no daemon answers; it moves
#: with the hook process entry to ``shells/`` in the ingest change, where it opens a MemoryManager.
HOOK_CONTEXT_PENDING: tuple[str, ...] = ()
#: Where the store's parts may be built: the composition root, the fakes' entry (``open_fake`` hands
#: them to the root), and the packages that define them.
COMPOSERS = ("api.py", "testing.py", "engine/", "embed/", "index/")

#: A string that reads as an SQL statement (keywords in capitals, as the engine writes them).
SQL_STATEMENT = re.compile(
    r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+(?:OR\s+[A-Z]+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bCREATE\s+(?:TEMP\s+|TEMPORARY\s+|VIRTUAL\s+|UNIQUE\s+)?(?:TABLE|INDEX|TRIGGER|VIEW)\b"
    r"|\b(?:DROP|ALTER)\s+(?:TABLE|INDEX|TRIGGER|VIEW)\b|\bPRAGMA\s+\w+|\bBEGIN\s+(?:IMMEDIATE|EXCLUSIVE|DEFERRED)\b"
    r"|^\s*(?:COMMIT|ROLLBACK)\s*$"
)


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def outside_engine(*exempt: tuple[str, ...]) -> Iterator[Path]:
    """Every module of the package outside ``engine/`` and the ``exempt`` paths (folders end in /)."""
    skipped = ("engine/", *(prefix for group in exempt for prefix in group))
    for path in MODULES.values():
        if not relative(path).startswith(skipped):
            yield path


def docstrings(tree: ast.AST) -> set[int]:
    """``id()`` of the docstring nodes of a module and its classes and functions (prose, not SQL)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_strings(path: Path) -> Iterator[tuple[int, str]]:
    """The string constants of ``path`` that read as SQL statements (an f-string is read whole, its
    fields as ``{}``), with their lines."""
    tree = ast.parse(path.read_text(), str(path))
    skip = docstrings(tree) | {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if SQL_STATEMENT.search(text):
            yield node.lineno, " ".join(text.split())[:80]


def test_no_sql_outside_the_engine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in outside_engine(NOT_THE_CATALOG)
        for line, text in sql_strings(path)
    ]
    assert not found, "SQL outside engine/ (add a named repository method instead):\n" + "\n".join(found)


def sqlite_imports(path: Path) -> Iterator[int]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        if any(module.split(".")[0] == "sqlite3" for module in modules):
            yield node.lineno


def test_no_sqlite3_import_outside_the_engine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}" for path in outside_engine(NOT_THE_CATALOG) for line in sqlite_imports(path)
    ]
    assert not found, "sqlite3 imported outside engine/:\n" + "\n".join(found)


def store_imports(path: Path) -> Iterator[int]:
    """Lines importing the Store class (``remindful.engine.store``), anywhere in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "remindful.engine.store":
            if any(alias.name == "Store" for alias in node.names):
                yield node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "remindful.engine":
            if any(alias.name == "store" for alias in node.names):
                yield node.lineno
        elif isinstance(node, ast.Import) and any(a.name == "remindful.engine.store" for a in node.names):
            yield node.lineno


def test_services_take_narrow_parts_not_the_store() -> None:
    services = [p for p in MODULES.values() if relative(p).startswith("services/")]
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in services
        if not relative(path).startswith(HOOK_CONTEXT_PENDING)
        for line in store_imports(path)
    ]
    assert services
    assert not found, "services importing the Store (declare a Protocol of what they use):\n" + "\n".join(found)


def catalog_reaches(path: Path) -> Iterator[int]:
    """Lines reaching a store's catalog (``x.catalog``), whose ``read``/``write`` run raw SQL; the
    settings' ``catalog`` section (``settings.catalog.url``) is configuration, not the catalog."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "catalog":
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if not name.endswith("settings"):
                yield node.lineno


def test_only_the_engine_and_the_root_reach_the_catalog() -> None:
    """``Catalog.read``/``write`` are the engine's: a service gets repositories, never the catalog."""
    found = [
        f"{path.relative_to(ROOT)}:{line}" for path in outside_engine(("api.py",)) for line in catalog_reaches(path)
    ]
    assert not found, "the catalog reached outside engine/ and api.py (use a repository):\n" + "\n".join(found)


def part_constructors() -> set[str]:
    """Names whose call builds a part of the store: Store, Catalog, every index and embedder class
    (``...Index``, ``...Embedder``) defined in ``index/`` and ``embed/``, and ``default_embedder``."""
    names = {"Store", "Catalog", "default_embedder"}
    for path in MODULES.values():
        if relative(path).startswith(("index/", "embed/")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef) and node.name.endswith(("Index", "Embedder")):
                    names.add(node.name)
    return names


def constructions(path: Path, names: set[str]) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names:
                yield node.lineno, name


def test_the_store_is_composed_only_at_the_root() -> None:
    names = part_constructors()
    assert {"Store", "Catalog", "ChromaEmbeddedIndex", "InMemoryIndex", "OnnxMiniLMEmbedder"} <= names
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}(...)"
        for path in MODULES.values()
        if not relative(path).startswith((*COMPOSERS, *HOOK_CONTEXT_PENDING))
        for line, name in constructions(path, names)
    ]
    assert not found, "parts of the store built outside the composition root (api.py):\n" + "\n".join(found)


def test_the_catalog_checks_see_what_they_forbid(tmp_path: Path) -> None:
    """The walkers themselves: a service's SQL (plain, f-string, implicit concatenation), its
    sqlite3 import, a Store import, its reach for the catalog and a constructed index are found;
    prose is not."""
    probe = tmp_path / "_catalog_probe.py"
    probe.write_text(
        '"""Reads ``PRAGMA integrity_check`` and SELECT x FROM y in prose."""\n'
        "import sqlite3\n"
        "from remindful.engine.store import Store\n"
        "from remindful.index import ChromaEmbeddedIndex\n"
        "def f(store, table):\n"
        "    catalog = store.catalog\n"
        '    catalog.read("SELECT count(*) " "FROM memories")\n'
        '    catalog.write(lambda c: c.execute(f"DELETE FROM {table} WHERE id = ?", (1,)))\n'
        '    return ChromaEmbeddedIndex(path="x"), "select a few words from the list"\n'
    )
    assert [line for line, _text in sql_strings(probe)] == [7, 8]
    assert list(sqlite_imports(probe)) == [2]
    assert list(store_imports(probe)) == [3]
    assert list(catalog_reaches(probe)) == [6]
    assert list(constructions(probe, part_constructors())) == [(9, "ChromaEmbeddedIndex")]


# -- the Store's private attributes stay inside the engine ----------------------------------------------


def store_private_names() -> set[str]:
    """Private attributes and methods of the engine's Store (from engine/store.py)."""
    return private_names(PACKAGE / "engine" / "store.py", "Store")


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
