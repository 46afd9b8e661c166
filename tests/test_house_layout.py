"""The house rules of docs/design (rooms and arrows) checked against today's imports.

Every ``import`` in the project's modules counts, at module level or inside a function, since a
late import is still an arrow a reader has to follow. The checks: no import cycle anywhere;
top-level rooms import only rooms below them; core's rooms import only the layers below theirs;
mqctl's sub-packages import only the ones below them; no module outside tests is over 500 lines;
no class over 25 methods without a docstring saying why it is one concept.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOMS = ("formats", "core", "replication", "plugins", "spark", "mqctl")
# which rooms each room may import (itself always); arrows point down the design's list
ROOM_MAY_IMPORT = {
    "formats": set(),
    "core": {"formats"},
    "replication": {"core", "formats"},
    "plugins": {"replication", "core", "formats"},
    "spark": {"formats"},
    "mqctl": {"plugins", "replication", "core", "formats", "spark"},
}
# mqctl's sub-packages: hosts (network-namespace labs) <- common <- nodes <- admin, top <- analyze,
# dump <- bench, chaos
MQCTL_MAY_IMPORT = {
    "common": {"hosts"},
    "hosts": set(),
    "nodes": {"common", "hosts"},
    "admin": {"common", "nodes"},
    "top": {"common", "nodes"},
    "analyze": {"common"},
    "dump": {"common"},
    "bench": {"common", "nodes", "admin", "analyze", "top"},
    "chaos": {"common", "nodes", "admin", "hosts"},
}
# core's layers, bottom first: a room of core/ (a sub-package, or a top module) imports only
# rooms of lower layers. Shared types and contracts at the bottom; the wire below metrics (it
# counts latency through remoting.processor.LatencyMeter, which metrics' Histogram fits); the
# hook contracts above every room they name; the servers, which assemble a node, on top.
CORE_LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    {"errors"},
    {"clock", "addresses", "nursery", "topic_names", "json_files", "plugin_markers"},
    {"node_specs", "proxy_settings"},
    {"filter"},
    {"remoting"},
    {"metrics"},
    {"config"},
    {"acl"},
    {"store"},
    {"client"},
    {"namesrv"},
    {"broker"},
    {"proxy"},
    {"hookspecs"},
    {"plugin_manager"},
    {"servers"},
))
MODULE_LINES_MAX = 500
CLASS_METHODS_MAX = 25


def module_files() -> dict[str, Path]:
    modules = {}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def imported(path: Path, name: str, modules: dict[str, Path]) -> Iterator[str]:
    """The project modules ``path`` (module ``name``) imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: set(imported(path, name, modules)) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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


def test_no_import_cycle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_rooms_import_only_rooms_below_them() -> None:
    upward = [f"{src} -> {dst}" for src, targets in import_graph().items() for dst in targets
              if dst.split(".")[0] != src.split(".")[0]
              and dst.split(".")[0] not in ROOM_MAY_IMPORT[src.split(".")[0]]]
    assert upward == []


def core_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "core" and len(parts) > 1 else None


def upward_core_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports between core's rooms that do not point to a lower layer."""
    level = {room: n for n, layer in enumerate(CORE_LAYERS) for room in layer}
    found = []
    for src, targets in graph.items():
        src_room = core_room(src)
        for dst in targets:
            dst_room = core_room(dst)
            if src_room and dst_room and dst_room != src_room and not level[dst_room] < level[src_room]:
                found.append(f"{src} -> {dst}")
    return sorted(found)


def test_every_room_of_core_has_a_layer() -> None:
    rooms = {r for name in module_files() if (r := core_room(name))}
    placed = set().union(*CORE_LAYERS)
    assert rooms == placed


def test_core_rooms_import_only_lower_layers() -> None:
    assert upward_core_imports(import_graph()) == []


def test_the_layer_check_finds_an_upward_import() -> None:
    graph = {"core.remoting.connection": {"core.metrics.counters", "core.errors"},
             "core.metrics.labels": {"core.remoting.codes"}}
    assert upward_core_imports(graph) == ["core.remoting.connection -> core.metrics.counters"]


def test_mqctl_sub_packages_import_only_the_ones_below_them() -> None:
    graph = import_graph()
    assert set(MQCTL_MAY_IMPORT) == {n.split(".")[1] for n in graph if n.count(".") >= 2 and n.startswith("mqctl.")}
    upward = []
    for src, targets in graph.items():
        parts = src.split(".")
        if parts[0] != "mqctl" or len(parts) < 3:
            continue  # mqctl.main composes everything; old-spelling shims run one module
        for dst in targets:
            sub = dst.split(".")[1] if dst.startswith("mqctl.") and dst.count(".") >= 1 else None
            if sub and sub != parts[1] and sub not in MQCTL_MAY_IMPORT[parts[1]]:
                upward.append(f"{src} -> {dst}")
    assert upward == []


@pytest.mark.parametrize("room", ROOMS)
def test_no_module_over_the_size_limit(room: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / room).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MODULE_LINES_MAX}
    assert long == {}


def big_classes_without_a_reason(path: Path) -> list[str]:
    """Classes of ``path`` over CLASS_METHODS_MAX methods whose docstring does not say "One concept"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef):
            methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            if len(methods) > CLASS_METHODS_MAX and "One concept" not in (ast.get_docstring(node) or ""):
                found.append(f"{node.name} ({len(methods)} methods)")
    return found


def test_no_class_past_one_concept_without_saying_why() -> None:
    found = {str(p.relative_to(ROOT)): big for p in module_files().values()
             if not p.name.endswith("_pb2.py") and (big := big_classes_without_a_reason(p))}
    assert found == {}


def test_the_class_check_finds_a_big_class(tmp_path: Path) -> None:
    body = "".join(f"    def m{i}(self): ...\n" for i in range(CLASS_METHODS_MAX + 1))
    module = tmp_path / "big.py"
    module.write_text(f'class Big:\n    """Many things."""\n{body}\nclass Said:\n'
                      f'    """One concept: a reason."""\n{body}')
    assert big_classes_without_a_reason(module) == ["Big (26 methods)"]
