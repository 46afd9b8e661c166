import inspect
import re
from pathlib import Path

import pytest

from core import hookspecs
from core.plugin_manager import BLOCK_ENV, PluginHost
from core.plugin_markers import hookimpl
from plugins import BUILTIN_PLUGINS, plugin_host

REPO = Path(__file__).resolve().parents[2]
HOOK_NAMES = sorted(n for n, f in inspect.getmembers(hookspecs, inspect.isfunction) if n.startswith("mq_"))


class First:
    @hookimpl
    def mq_segment_retired(self, segment, archive):
        CALLS.append(("first", segment))


class Second:
    @hookimpl
    def mq_segment_retired(self, segment, archive):
        CALLS.append(("second", segment))


CALLS: list = []


def test_builtins_register_in_order_and_can_be_blocked(monkeypatch):
    CALLS.clear()
    host = PluginHost([First(), Second()], load_entry_points=False)
    assert host.names[:2] == ["First", "Second"]
    host.segment_retired(Path("x"), None)
    assert {c[0] for c in CALLS} == {"first", "second"}
    monkeypatch.setenv(BLOCK_ENV, "Second")
    host = PluginHost([First(), Second()], load_entry_points=False)
    assert "Second" not in host.names
    CALLS.clear()
    host.segment_retired(Path("y"), None)
    assert CALLS == [("first", Path("y"))]


def test_default_host_has_the_builtin_tuple():
    host = plugin_host(load_entry_points=False)
    assert [n for n in host.names if not n.startswith("<")] == [p.__name__ for p in BUILTIN_PLUGINS]


def test_hook_names_are_prefixed_and_documented_in_the_spec():
    assert HOOK_NAMES, "no hookspecs found"
    for name in HOOK_NAMES:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert len(doc.strip()) > 40, f"{name} needs a contract docstring"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hookspec_is_documented_and_exercised(name):
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    assert name in docs, f"{name} is not described in README.md or docs/"
    tests = [p for p in (REPO / "tests").rglob("test_*.py")]
    impl = re.compile(rf"def {name}\(")
    assert any(impl.search(p.read_text()) for p in tests), f"no test implements {name}"
