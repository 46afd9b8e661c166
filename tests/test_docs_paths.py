"""Every path README.md and docs/ name exists: a file or folder of the repository (`core/store/`,
[links](docs/store.md), `core/servers/broker.py:40`), and every module or definition named in
dotted form (`core.store.message_store.MessageStore`) once its first two parts name a package or
module of ours (so config keys such as `replication.mode` are not mistaken for modules)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TOP = ("formats", "core", "replication", "plugins", "spark", "mqctl", "tests", "docs", ".ci")
ROOMS = ("formats", "core", "replication", "plugins", "spark", "mqctl", "tests")


def named_paths(doc: Path) -> set[str]:
    """Repository paths in ``doc``: backticked or linked, with a "/" and a known first part (or
    relative to the doc's folder), a ``:line`` suffix dropped."""
    text = doc.read_text()
    found = set()
    for token in set(re.findall(r"`([^`\s]+)`", text)) | set(re.findall(r"\]\(([^)\s#]+)", text)):
        token = token.rstrip(".,;")
        if "/" not in token or token.startswith(("http:", "https:", "mailto:")) or re.search(r"[<>*{}$=|]", token):
            continue
        path = token.split(":")[0]
        if path.split("/")[0] in TOP or path.startswith("../") or (doc.parent / path).exists():
            found.add(path)
    return found


def exists(doc: Path, path: str) -> bool:
    return (REPO / path).exists() or (doc.parent / path).exists()


def module_file(dotted: str) -> Path | None:
    base = REPO / dotted.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def defined(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def unresolved_dotted(doc: Path) -> list[str]:
    """Backticked dotted names under one of our packages that name no module or definition."""
    bad = []
    for name in set(re.findall(r"`((?:%s)(?:\.\w+)+)`" % "|".join(ROOMS), doc.read_text())):
        parts = name.split(".")
        if module_file(".".join(parts[:2])) is None:
            continue  # a config key or an entry-point group, not a module of ours
        k = max(k for k in range(2, len(parts) + 1) if module_file(".".join(parts[:k])) is not None)
        rest = parts[k:]
        module = module_file(".".join(parts[:k]))
        assert module is not None
        if len(rest) > 2 or (rest and rest[0] not in defined(module)):
            bad.append(name)
    return sorted(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    assert sorted(p for p in named_paths(doc) if not exists(doc, p)) == []
    assert unresolved_dotted(doc) == []


def test_the_check_finds_a_missing_path_and_module(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("See `core/store/gone.py`, `core/store/` and `core.clock.Gone`, "
                   "`core.clock.now_ms`, `replication.mode`.")
    assert named_paths(doc) == {"core/store/gone.py", "core/store/"}
    assert [p for p in named_paths(doc) if not exists(doc, p)] == ["core/store/gone.py"]
    assert unresolved_dotted(doc) == ["core.clock.Gone"]
