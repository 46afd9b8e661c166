"""core/broker in rooms by concept, each handler typed against a Protocol of what it uses.

(a) No module of core/broker imports the ``Broker`` class's module but the request table, which
    types every handler against the Broker (so mypy checks the Broker is each handler's Protocol).
(b) Each handler module declares ``typing.Protocol`` classes listing exactly the broker members
    its functions use: every ``broker.<name>`` on a parameter annotated with the Protocol (or a
    TypeVar bound to it) is a member, every member declared is used, and a Protocol extends
    another only when its functions hand the broker to a function typed with that other one.
(c) A real Broker has every member of every Protocol, so the Protocols cannot drift from it.
(d) At most ten modules at the top of core/broker; the rest in rooms that say what they hold.
"""

from __future__ import annotations

import ast
import gc
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path

from core.broker.broker import Broker
from core.broker.wire.request_table import HANDLERS
from tests.core.cluster_harness import start_cluster

REPO = Path(__file__).resolve().parents[2]
BROKER_ROOM = REPO / "core" / "broker"
BROKER_MODULE = "core.broker.broker"
TOP_MODULES_MAX = 10
# the request table types its handlers with the Broker itself: where mypy checks each Protocol
MAY_IMPORT_BROKER = {"core.broker.wire.request_table"}
# handler modules besides those the request table names: they take the broker too
LOOPS_AND_SCRAPES = {"core.broker.pop.processor", "core.broker.pop.acks", "core.broker.pop.revive",
                     "core.broker.registration", "core.broker.slave_sync", "core.broker.metrics"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def broker_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(BROKER_ROOM.rglob("*.py"))}


def handler_modules() -> set[str]:
    found = set(LOOPS_AND_SCRAPES)
    for handler in HANDLERS.values():
        wrapped = inspect.getclosurevars(handler).nonlocals.get("handler", handler)  # when_pop_ready's
        if wrapped.__module__ != "core.broker.wire.request_table":  # its lambda calls handle_send
            found.add(wrapped.__module__)
    return found


# ------------------------------------------------------------------------------------ (a) and (d)


def imports_of(source: str, name: str, is_package: bool) -> set[str]:
    """The dotted names a module's ``import`` statements name (``from a import b``: a and a.b)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_only_the_request_table_imports_the_broker_module() -> None:
    importers = {name for name, path in broker_modules().items() if name != BROKER_MODULE
                 and BROKER_MODULE in imports_of(path.read_text(), name, path.name == "__init__.py")}
    assert importers == MAY_IMPORT_BROKER


def test_the_import_check_sees_a_type_checking_import() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..broker import Broker\n"
    assert BROKER_MODULE in imports_of(source, "core.broker.consume.pull", False)
    assert BROKER_MODULE in imports_of("from core.broker import broker\n", "core.broker.x", False)


def test_at_most_ten_modules_at_the_top_and_every_room_says_what_it_holds() -> None:
    top = sorted(path.name for path in BROKER_ROOM.glob("*.py"))
    assert len(top) <= TOP_MODULES_MAX, top
    for room in sorted(p for p in BROKER_ROOM.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert ast.get_docstring(ast.parse((room / "__init__.py").read_text())), f"{room.name}/__init__.py"


# ------------------------------------------------------------------------------------ (b)


@dataclass
class ProtocolClass:
    module: str
    name: str
    own: set[str]
    bases: list[str]  # other Protocols it extends, as "module:Name"
    used: set[str] = field(default_factory=set)  # broker.<name> on parameters typed with it
    handed_to: set[str] = field(default_factory=set)  # Protocols of functions it hands the broker to

    @property
    def key(self) -> str:
        return f"{self.module}:{self.name}"


class ModuleIndex:
    """The Protocols, TypeVars, functions and imported names of a set of modules, by AST."""

    def __init__(self, sources: dict[str, str], protocol_modules: set[str] | None = None) -> None:
        """``protocol_modules``: the modules whose Protocols are brokers' (default: all)."""
        self.trees = {name: ast.parse(source) for name, source in sources.items()}
        self.protocols: dict[str, ProtocolClass] = {}
        self.bounds: dict[str, str] = {}  # "module:TypeVarName" -> "module:ProtocolName"
        self.imported: dict[str, dict[str, str]] = {}  # module -> local name -> "module:name" or module
        for module, tree in self.trees.items():
            self.imported[module] = self._imports(tree)
        for module, tree in self.trees.items():
            for node in tree.body:
                if (isinstance(node, ast.ClassDef) and any(_name(b) == "Protocol" for b in node.bases)
                        and (protocol_modules is None or module in protocol_modules)):
                    own = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
                    own |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                    bases = [self.resolve(module, _name(b)) for b in node.bases if _name(b) != "Protocol"]
                    self.protocols[f"{module}:{node.name}"] = ProtocolClass(module, node.name, own, bases)
        for module, tree in self.trees.items():
            for node in tree.body:
                bound = _typevar_bound(node)
                if bound:
                    self.bounds[f"{module}:{bound[0]}"] = self.resolve(module, bound[1])
        for module, tree in self.trees.items():
            for fn in ast.walk(tree):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._collect(module, fn)

    @staticmethod
    def _imports(tree: ast.Module) -> dict[str, str]:
        names = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        return names

    def resolve(self, module: str, name: str) -> str:
        """``name`` as used in ``module``: "defining module:name"."""
        return self.imported.get(module, {}).get(name, f"{module}:{name}")

    def protocol_of(self, module: str, annotation: ast.expr | None) -> ProtocolClass | None:
        if annotation is None:
            return None
        key = self.resolve(module, _name(annotation))
        key = self.bounds.get(key, key)
        return self.protocols.get(key)

    def params(self, module: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
        return [*fn.args.posonlyargs, *fn.args.args]

    def function(self, module: str, call: ast.Call) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The function a call calls, when it is one of the indexed modules' top-level functions."""
        if isinstance(call.func, ast.Name):
            key = self.resolve(module, call.func.id)
        elif isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
            owner = self.resolve(module, call.func.value.id).replace(":", ".")  # from pkg import mod
            key = f"{owner}:{call.func.attr}"
        else:
            return None
        target_module, _, target = key.partition(":")
        for node in self.trees.get(target_module, ast.Module(body=[], type_ignores=[])).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == target:
                return target_module, node
        return None

    def _collect(self, module: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for arg in [*self.params(module, fn), *fn.args.kwonlyargs]:
            protocol = self.protocol_of(module, arg.annotation)
            if protocol is None:
                continue
            attribute_of: set[int] = set()
            handed: set[int] = set()
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == arg.arg:
                    protocol.used.add(node.attr)
                    attribute_of.add(id(node.value))
                elif isinstance(node, ast.Call):
                    for position, value in enumerate(node.args):
                        if isinstance(value, ast.Name) and value.id == arg.arg:
                            handed.add(id(value))
                            self._handed(module, protocol, node, position)
            aliased = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == arg.arg
                       and id(n) not in attribute_of | handed]
            assert not aliased, f"{module}.{fn.name}: {arg.arg} is used other than as {arg.arg}.<name> or an argument"

    def _handed(self, module: str, protocol: ProtocolClass, call: ast.Call, position: int) -> None:
        callee = self.function(module, call)
        if callee is None:
            return
        callee_module, callee_fn = callee
        params = self.params(callee_module, callee_fn)
        if position < len(params):
            wanted = self.protocol_of(callee_module, params[position].annotation)
            if wanted is not None and wanted.key != protocol.key:
                protocol.handed_to.add(wanted.key)

    def members(self, key: str) -> set[str]:
        protocol = self.protocols[key]
        return protocol.own.union(*(self.members(base) for base in protocol.bases if base in self.protocols))

    def problems(self, module: str) -> list[str]:
        found = []
        declared = [p for p in self.protocols.values() if p.module == module]
        if not declared:
            found.append(f"{module}: declares no Protocol of what it uses of the broker")
        for p in declared:
            inherited = set().union(*(self.members(base) for base in p.bases if base in self.protocols))
            if extra := p.own - p.used:
                found.append(f"{p.key} lists members {module} never uses: {sorted(extra)}")
            if missing := p.used - p.own - inherited:
                found.append(f"{p.key} lacks members {module} uses: {sorted(missing)}")
            if again := p.own & inherited:
                found.append(f"{p.key} declares again what it extends: {sorted(again)}")
            if set(p.bases) != p.handed_to:
                found.append(f"{p.key} extends {sorted(p.bases)}, but hands the broker to {sorted(p.handed_to)}")
        for fn in ast.walk(self.trees[module]):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in [*self.params(module, fn), *fn.args.kwonlyargs]:
                    if arg.arg == "broker" and self.protocol_of(module, arg.annotation) not in declared:
                        found.append(f"{module}.{fn.name}: broker is not typed with a Protocol of {module}")
        return found


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return ""


def _typevar_bound(node: ast.stmt) -> tuple[str, str] | None:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call) and _name(node.value.func) == "TypeVar"):
        for keyword in node.value.keywords:
            if keyword.arg == "bound":
                return node.targets[0].id, _name(keyword.value)
    return None


def broker_index() -> ModuleIndex:
    return ModuleIndex({name: path.read_text() for name, path in broker_modules().items()}, handler_modules())


def test_the_handler_modules_are_found() -> None:
    found = handler_modules()
    assert {"core.broker.produce.send", "core.broker.consume.pull", "core.broker.admin.admin",
            "core.broker.pop.processor", "core.broker.timers.recall"} <= found
    assert len(found) == 16


def test_each_handler_module_types_its_broker_with_exactly_what_it_uses() -> None:
    index = broker_index()
    problems = [problem for module in sorted(handler_modules()) for problem in index.problems(module)]
    assert problems == []


SHAPES = '''
from typing import Protocol, TypeVar
from core.broker.x.helpers import Writer, write


class Sending(Writer, Protocol):
    topics: object
    {extra}

    def topics_changed(self) -> None: ...


Gated = TypeVar("Gated", bound=Sending)


def handle(broker: Sending) -> None:
    broker.topics_changed()
    write(broker)
    _more(broker)


def _more(broker: Gated) -> None:
    print(broker.topics, broker.writes)
'''
HELPERS = '''
from typing import Protocol


class Writer(Protocol):
    writes: object


def write(broker: Writer) -> None:
    broker.writes.put()
'''


def shapes(extra: str = "", helpers: str = HELPERS) -> list[str]:
    index = ModuleIndex({"core.broker.x.handler": SHAPES.format(extra=extra), "core.broker.x.helpers": helpers})
    return index.problems("core.broker.x.handler") + index.problems("core.broker.x.helpers")


def test_the_protocol_check_passes_a_protocol_that_lists_what_is_used() -> None:
    assert shapes() == []


def test_the_protocol_check_catches_a_member_never_used() -> None:
    assert shapes(extra="pid: int") == ["core.broker.x.handler:Sending lists members core.broker.x.handler "
                                        "never uses: ['pid']"]


def test_the_protocol_check_catches_a_member_missing() -> None:
    helpers = HELPERS.replace("broker.writes.put()", "broker.writes.put(broker.store)")
    assert shapes(helpers=helpers) == ["core.broker.x.helpers:Writer lacks members core.broker.x.helpers "
                                       "uses: ['store']"]


def test_the_protocol_check_catches_a_base_it_does_not_need_and_an_alias() -> None:
    module = SHAPES.format(extra="").replace("    write(broker)\n", "")
    index = ModuleIndex({"core.broker.x.handler": module, "core.broker.x.helpers": HELPERS})
    assert index.problems("core.broker.x.handler") == [
        "core.broker.x.handler:Sending extends ['core.broker.x.helpers:Writer'], but hands the broker to []"]
    aliased = HELPERS.replace("    broker.writes.put()", "    b = broker\n    b.writes.put()")
    try:
        ModuleIndex({"core.broker.x.helpers": aliased})
    except AssertionError as exc:
        assert "is used other than as broker.<name>" in str(exc)
    else:
        raise AssertionError("an alias of the broker went unseen")


# ------------------------------------------------------------------------------------ (c)


async def test_a_real_broker_has_every_member_of_every_protocol(nursery, tmp_path) -> None:
    cluster = await start_cluster(nursery, tmp_path)
    running = await cluster.start_broker()
    gc.collect()
    broker = next(b for b in gc.get_objects() if type(b) is Broker and b.address == running.address)
    index = broker_index()
    assert len(index.protocols) >= 15
    missing = {key: sorted(name for name in index.members(key) if not hasattr(broker, name))
               for key in index.protocols}
    assert {key: names for key, names in missing.items() if names} == {}
    for key, protocol in index.protocols.items():  # methods are methods, attributes are not
        cls = getattr(importlib.import_module(protocol.module), protocol.name)
        for name in protocol.own:
            assert callable(getattr(cls, name, None)) == inspect.ismethod(getattr(broker, name)), f"{key}.{name}"
