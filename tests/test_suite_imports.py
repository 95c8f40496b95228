"""Every test module, whatever tier it belongs to (`slow`, `gpu`, `engines`, `references`), is
checked here in the default tier: a module that the default run deselects or skips must not rot
unseen. Collection already imports each module; what it cannot see is an import inside a test
function (a GPU test importing a helper another test file no longer defines fails only on a GPU).
So every `from X import name` in a test module, at any depth, where X is this project or another
test module, must name something X has."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

TESTS = pathlib.Path(__file__).parent
LOCAL = {p.stem for p in TESTS.glob("*.py")}  # test modules and helpers (lawtest, conftest)
MODULES = sorted(p.stem for p in TESTS.glob("test_*.py"))


def _ours(module: str) -> bool:
    return module.split(".")[0] in LOCAL | {"draftsmith"}


def _has(module: str, name: str) -> bool:
    mod = importlib.import_module(module)
    if hasattr(mod, name):
        return True
    try:  # `from package import submodule`
        importlib.import_module(f"{module}.{name}")
    except ModuleNotFoundError:
        return False
    return True


def unresolved_imports(path: pathlib.Path) -> list[str]:
    """`module.name` for every import of this project or a test module in `path` that does not
    resolve, at module level or inside a function."""
    missing = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _ours(node.module):
            try:
                importlib.import_module(node.module)
            except ModuleNotFoundError:
                missing.append(f"{node.module} (line {node.lineno})")
                continue
            missing += [
                f"{node.module}.{a.name} (line {node.lineno})"
                for a in node.names
                if a.name != "*" and not _has(node.module, a.name)
            ]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if _ours(a.name):
                    try:
                        importlib.import_module(a.name)
                    except ModuleNotFoundError:
                        missing.append(f"{a.name} (line {node.lineno})")
    return missing


@pytest.mark.parametrize("name", MODULES)
def test_every_test_module_imports_what_it_names(name):
    importlib.import_module(name)  # tests/ is on sys.path (pytest's rootdir-relative import)
    assert unresolved_imports(TESTS / f"{name}.py") == [], f"tests/{name}.py imports names that do not exist"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    """The check finds a stale import hidden in a function body (what a GPU-only test carried)."""
    stale = tmp_path / "test_stale.py"
    stale.write_text(
        "def test_x():\n    from test_contract import NO_SUCH_NAME\n    from draftsmith.kinds import KINDS\n"
    )
    assert unresolved_imports(stale) == ["test_contract.NO_SUCH_NAME (line 2)"]
