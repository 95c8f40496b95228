"""The dependency rules of ARCHITECTURE.md, read from the source (every import, lazy ones too):
layers import only downwards, no two modules import each other in a loop, infer/ names no
drafter kind, and outside the registry (draftsmith/kinds.py) no module spells a kind in an `if`
or keys a table by kind names. The kind names are the registry's, and the folders are those the
importable package lives in (the repository's, or a copy on PYTHONPATH with a kind added)."""

import ast
import importlib.util
import pathlib

from draftsmith.kinds import KINDS

FOLDERS = {
    pkg: pathlib.Path(importlib.util.find_spec(pkg).submodule_search_locations[0])
    for pkg in ("draftsmith", "draftsmith.infer", "draftsmith.models", "draftsmith.train")
}
ROOT = FOLDERS["draftsmith"].parent
# Lowest first. The bench and the prompt sets are tools on the runtime (beside the CLI on disk);
# the trainer's periodic evaluation uses them, so they sit below train/.
LAYERS = [
    {
        "draftsmith",
        "draftsmith.errors",
        "draftsmith.fileio",
        "draftsmith.kinds",
    },  # the registry: names and lazy references only
    {"draftsmith.infer"},
    {"draftsmith.models"},
    {"draftsmith.evaluation"},
    {"draftsmith.train"},
    # the contract suite's tiny instances (draftsmith/testing.py) are built through the trainer's tasks
    {"draftsmith.shipping", "draftsmith.plan", "draftsmith.plan_job", "draftsmith.plan_regen", "draftsmith.plan_cli"},
    {"draftsmith.testing"},
    # entry points: `python -m draftsmith.train` is the training command (it prints the plan first)
    {"draftsmith.cli", "draftsmith.__main__", "draftsmith.train.__main__"},
]
KIND_NAMES = tuple(KINDS)


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """Every draftsmith module `name` imports, at any depth of the file (lazy imports count)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = base.rsplit(".", node.level - 1)[0] if node.level > 1 else base
                mod = f"{pkg}.{node.module}" if node.module else pkg
            else:
                mod = node.module or ""
            # `from pkg import sub` imports pkg.sub (the package's __init__ runs first, as for any
            # submodule: not an edge); `from pkg import name` imports pkg
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t.startswith("draftsmith") and t != name:
                found.add(t)
    return found


def layer(mod: str) -> int:
    for i, group in enumerate(LAYERS):  # a module named in a group is there, whatever its package's layer
        if mod in group:
            return i
    for i, group in enumerate(LAYERS):
        for g in sorted(group, key=len, reverse=True):
            if mod == g or mod.startswith(g + "."):
                if g == "draftsmith" and mod != "draftsmith":
                    continue
                return i
    raise AssertionError(f"{mod} is in no layer")


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {m: imports(m, p, known) for m, p in mods.items()}


def test_layers_import_only_downwards():
    bad = [
        f"{m} (layer {layer(m)}) imports {d} (layer {layer(d)})"
        for m, deps in graph().items()
        for d in deps
        if layer(d) > layer(m)
    ]
    assert not bad, "\n".join(bad)


# train/'s own layers, lowest first: a module imports only its own layer and the ones below (lazy
# imports count). The recipe schema at the bottom; the helpers on a recipe (peft adapters,
# accelerate's wrappers); the losses every task's loss is built of; then the pipelines, each a
# folder, each building on the ones before it; on top the package itself (its lazy `train`), its
# command. Every module of train/ is placed: a new one must be too.
TRAIN_LAYERS = [
    # the recipe: its sections (recipe), their bounds (recipe_bounds), loading (config); cli_options: the
    # command options the parser declares without torch
    {"recipe_bounds", "recipe", "config", "cli_options"},
    {"lora", "distributed"},
    {"losses"},
    {"data", "preflight"},  # preflight: what a run needs on disk (the data's and features' files), checked first
    {"features"},
    {"tasks"},
    {"trainer"},
    {"", "__main__"},
]


def train_layer(mod: str) -> int | None:
    """The train/ layer of module `mod` (by its first name under draftsmith.train), None outside train/."""
    parts = mod.split(".")
    if parts[:2] != ["draftsmith", "train"]:
        return None
    top = parts[2] if len(parts) > 2 else ""
    for i, group in enumerate(TRAIN_LAYERS):
        if top in group:
            return i
    raise AssertionError(f"{mod} is in no layer of train/: place it in TRAIN_LAYERS")


def test_train_layers_import_only_downwards():
    folders = {p.name for p in FOLDERS["draftsmith.train"].iterdir() if (p / "__init__.py").is_file()}
    assert folders == {"data", "features", "tasks", "trainer"}, folders  # the pipelines, one folder each
    bad = [
        f"{m} (train layer {train_layer(m)}) imports {d} (train layer {train_layer(d)})"
        for m, deps in graph().items()
        if train_layer(m) is not None
        for d in deps
        if train_layer(d) is not None and train_layer(d) > train_layer(m)
    ]
    assert not bad, "\n".join(bad)


def test_no_import_loops():
    g = graph()
    state, loops = {}, []

    def visit(m, stack):
        state[m] = 1
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                loops.append(" -> ".join(stack[stack.index(d) :] + [d]))
            elif d not in state:
                visit(d, stack + [d])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not loops, "\n".join(loops)


def test_infer_names_no_drafter_kind():
    for path in FOLDERS["draftsmith.infer"].glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in KIND_NAMES, f"{path.name} names the drafter kind {node.value!r}"


def test_no_kind_is_spelled_in_an_if_outside_the_declaration():
    """`if kind == "medusa"` anywhere but draftsmith/kinds.py means a new kind must touch that file too."""
    offenders = []
    for m, path in modules().items():
        if m in ("draftsmith.kinds",):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.If, ast.IfExp)) and isinstance(node.test, ast.Compare):
                consts = [c.value for c in ast.walk(node.test) if isinstance(c, ast.Constant)]
                if any(c in KIND_NAMES for c in consts):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "kind names in conditions: " + ", ".join(offenders)


def test_no_table_is_keyed_by_kind_names_outside_the_registry():
    """{"medusa": ..., "eagle": ...} anywhere but draftsmith/kinds.py is a second declaration a new
    kind would have to find and extend; a kind's layouts are objects its registry entry names."""
    offenders = []
    for m, path in modules().items():
        if m == "draftsmith.kinds":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                if sum(k in KIND_NAMES for k in keys) >= 2:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "tables keyed by kind names: " + ", ".join(offenders)


def test_the_registry_imports_nothing_but_the_errors_module():
    deps = graph()["draftsmith.kinds"]
    assert deps <= {"draftsmith.errors"}, deps
    tree = ast.parse((FOLDERS["draftsmith"] / "kinds.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "importlib", "dataclasses", "draftsmith"}, imported


def test_export_never_imports_the_engines():
    """shipping's own direction: the engines' drivers, publish and crosscheck read the export
    formats' declarations (`Format.crosscheck`, `Format.requires`); the export package never imports
    draftsmith.shipping.engines, where an engine is installed is draftsmith/shipping/installs.py."""
    bad = [
        f"{m} imports {d}"
        for m, deps in graph().items()
        if m.startswith("draftsmith.shipping.export")
        for d in deps
        if d == "draftsmith.shipping.engines" or d.startswith("draftsmith.shipping.engines.")
    ]
    assert not bad, "\n".join(bad)
