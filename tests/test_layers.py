"""The code's layering, beside import-linter's contracts (pyproject.toml, run by .ci/run): no module
imports another module's private names or reaches them through a module it imported, and only
dissector/native.py loads the native module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kafkawire", "replay", "report", "landing", "dissector", "protocol")


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_generated" not in path.parts:
                yield path


def _imports(path: Path):
    """(module imported from, name) for every `from X import name` of ours, relative ones resolved."""
    mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] in PACKAGES:
                for alias in node.names:
                    yield mod, base, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield mod, alias.name, None


def test_the_packages_exist():
    assert len(list(_modules())) > 40


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in _modules():
        for mod, base, name in _imports(path):
            if name is None or not name.startswith("_") or name.startswith("__"):
                continue
            if name == "_native" and mod == "dissector.native":
                continue  # the one place that loads the native module
            found.append(f"{mod}: from {base} import {name}")
    assert found == []


def test_no_module_reaches_a_private_name_through_another_module():
    """`analysis._tables(...)` after `from report import analysis`: another module's private name,
    reached as an attribute of the module imported (what the import check above cannot see)."""
    ours = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in _modules()}
    found = []
    for path in _modules():
        aliases = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                aliases.update({a.asname or a.name: a.name for a in node.names if a.name in ours})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                aliases.update(
                    {
                        a.asname or a.name: f"{node.module}.{a.name}"
                        for a in node.names
                        if f"{node.module}.{a.name}" in ours
                    }
                )
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            target = aliases.get(ast.unparse(node.value))
            if target is not None and target != mod and (target, node.attr) != ("dissector", "_native"):
                found.append(f"{mod}:{node.lineno}: {target}.{node.attr}")
    assert found == []


def test_only_dissector_native_loads_the_native_module():
    found = []
    for path in _modules():
        for mod, base, name in _imports(path):
            if (base == "dissector._native" or name == "_native" and base == "dissector") and mod != "dissector.native":
                found.append(mod)
    assert found == []


def test_the_lowest_layers_import_nothing_above_them():
    """import-linter's layers, in the test run too: protocol imports nothing of ours, dissector only protocol."""
    allowed = {"protocol": {"protocol"}, "dissector": {"dissector", "protocol"}}
    found = []
    for path in _modules():
        for mod, base, _ in _imports(path):
            top = mod.split(".")[0]
            if top in allowed and base.split(".")[0] in PACKAGES and base.split(".")[0] not in allowed[top]:
                found.append(f"{mod} imports {base}")
    assert found == []
