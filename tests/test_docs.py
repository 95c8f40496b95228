"""The README and the docs site cannot drift from the code.

- `mkdocs build --strict` passes (no broken link or anchor; the generated pages build);
- every `draftsmith ...` and `accelerate launch ...` command in README.md and docs/*.md parses with
  the CLI's own parsers (flags exist, choices are valid, recipe overrides are real keys), and
  every repository path a command names exists; a test of the checker shows it failing on a
  renamed flag;
- the generated config reference covers every recipe key, the README's kinds table matches the
  kind registry, and no page or help text carries work-log words.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import io
import pathlib
import re
import shlex
import subprocess
import sys
import typing

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A token naming something in the repository starts with one of its folders.
REPO_DIRS = ("configs/", "scripts/", "docs/", "tests/", "models/", "train/", "infer/", "draftsmith/")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


# --- collecting the commands -----------------------------------------------------------------------


def fenced_commands(text: str) -> list[str]:
    """Command lines in fenced blocks that start with `draftsmith ` or `accelerate launch `
    (a trailing backslash continues a line)."""
    out = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith(("draftsmith ", "accelerate launch ")):
                out.append(line)
    return out


def inline_commands(text: str) -> list[str]:
    """`draftsmith ...` spans in the prose (outside fenced blocks)."""
    prose = FENCE.sub("", text)
    return [m for m in INLINE.findall(prose) if m.startswith("draftsmith ")]


def all_commands() -> list[tuple[str, str, bool]]:
    """(page, command, full) for every command in the README and the docs."""
    out = []
    for page in PAGES:
        text = page.read_text()
        out += [(page.name, c, True) for c in fenced_commands(text)]
        out += [(page.name, c, False) for c in inline_commands(text)]
    return out


# --- checking one command ----------------------------------------------------------------------------


def _parse(parser: argparse.ArgumentParser, argv: list[str], known: bool = False):
    """argparse without its sys.exit: (namespace, rest) or a DocsCommandError with its message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_known_args(argv) if known else (parser.parse_args(argv), [])
    except SystemExit as e:
        message = err.getvalue().strip().splitlines()
        raise DocsCommandError(message[-1] if message else f"argparse exited {e.code}") from None


class DocsCommandError(Exception):
    pass


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _recipe_keys() -> set[str]:
    """Every dotted key a recipe has, over every kind's drafter section."""
    from draftsmith.kinds import drafter_configs
    from draftsmith.train.config import Recipe

    def keys(cls, prefix):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                yield from keys(hints[f.name], f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"

    out = {k for k in keys(Recipe, "") if not k.startswith("drafter")}
    for cls in drafter_configs().values():
        out |= set(keys(cls, "drafter."))
    return out


def _check_paths(tokens: list[str]) -> list[str]:
    problems = []
    for token in tokens:
        value = token.split("=", 1)[-1]
        if value.startswith(REPO_DIRS) and not re.search(r"[<{*]|\.\.\.", value):
            if not (ROOT / value).exists():
                problems.append(f"{value}: no such path in the repository")
    return problems


# Commands that parse with a parser of their own and take free-form recipe overrides
OWN_PARSER = {"train": "draftsmith.train", "features": "draftsmith.train.features"}


def _own_parser(prog: str) -> argparse.ArgumentParser:
    if prog == "draftsmith.train.features":
        from draftsmith.train.features.cli import build_parser
    else:
        from draftsmith.train.__main__ import build_parser
    return build_parser()


def _check_recipe(recipe: str, overrides: list[str]) -> list[str]:
    """The recipe exists and the overrides are real keys with valid values (the recipe loader's word)."""
    from draftsmith.errors import DraftsmithError
    from draftsmith.train.config import load_recipe

    if not (ROOT / recipe).is_file():
        return [f"recipe {recipe} does not exist"]
    try:
        load_recipe(ROOT / recipe, overrides)
    except DraftsmithError as e:
        return [str(e)]
    return []


def _check_train(argv: list[str], prog: str) -> list[str]:
    """`draftsmith train|features RECIPE ...` or `accelerate launch -m draftsmith.train[.features] RECIPE ...`."""
    args, rest = _parse(_own_parser(prog), argv, known=True)
    return _check_recipe(args.recipe, rest)


def _check_flags(parser: argparse.ArgumentParser, name: str, argv: list[str]) -> list[str]:
    """A prose span: every flag is an option of the command, or a recipe key where it takes overrides."""
    takes_overrides = name in OWN_PARSER or any(a.dest == "recipe" for a in parser._actions)
    keys = _recipe_keys() if takes_overrides else set()
    problems = []
    for token in argv:
        flag = token.split("=", 1)[0]
        if flag.startswith("-") and flag not in parser._option_string_actions and flag[2:] not in keys:
            problems.append(f"draftsmith {name} has no option {flag}" + (" or recipe key" if keys else ""))
    return problems


def check_command(command: str, full: bool = True) -> list[str]:
    """What is wrong with one documented command line ([] when it parses).

    full: the whole line is a command to run (a fenced block): it must parse completely. Otherwise
    (a prose span, which may hold placeholders) the subcommand and every flag must exist.
    """
    from draftsmith.cli import build_parser

    try:
        tokens = shlex.split(command, comments=True)
    except ValueError as e:
        return [f"cannot split: {e}"]
    problems = _check_paths(tokens)
    try:
        if tokens[:2] == ["accelerate", "launch"]:
            from accelerate.commands.launch import launch_command_parser

            args, _ = _parse(launch_command_parser(), tokens[2:])
            if args.config_file and not (ROOT / args.config_file).is_file():
                problems.append(f"--config_file {args.config_file} does not exist")
            if not args.module or args.training_script not in OWN_PARSER.values():
                return [*problems, "accelerate launch should run -m draftsmith.train or -m draftsmith.train.features"]
            return problems + _check_train(args.training_script_args, args.training_script)
        if tokens[0] != "draftsmith" or len(tokens) < 2:
            return [*problems, "not a draftsmith command"]
        name, argv, parser = tokens[1], tokens[2:], build_parser()
        if name in OWN_PARSER:
            if full:
                return problems + _check_train(argv, OWN_PARSER[name])
            return problems + _check_flags(_own_parser(OWN_PARSER[name]), name, argv)
        sub = parser if name.startswith("-") else _subparsers(parser).get(name)
        if sub is None or not full:
            return problems + ([f"no command 'draftsmith {name}'"] if sub is None else _check_flags(sub, name, argv))
        if any(a.dest == "recipe" for a in sub._actions):  # e.g. plan: the CLI parses it with parse_known_args
            args, rest = _parse(parser, tokens[1:], known=True)
            return problems + _check_recipe(args.recipe, rest)
        _parse(parser, tokens[1:])
    except DocsCommandError as e:
        problems.append(str(e))
    return problems


# --- the tests ---------------------------------------------------------------------------------------


def test_docs_hold_commands_to_check():
    commands = all_commands()
    pages = {page for page, _, _ in commands}
    assert len(commands) >= 30 and {"README.md", "getting-started.md", "training-at-scale.md"} <= pages
    assert any(c.startswith("accelerate launch") for _, c, _ in commands)


@pytest.mark.parametrize(("page", "command", "full"), all_commands(), ids=lambda v: str(v)[:60])
def test_documented_command_parses(page, command, full):
    assert check_command(command, full) == [], f"{page}: {command}"


@pytest.mark.parametrize(
    ("command", "full", "problem"),
    [
        # a flag renamed in the code (here: in the docs) is caught, in blocks and in prose
        ("draftsmith bench --draft truncated:2 --num-prompt-count 4", True, "unrecognized arguments"),
        ("draftsmith eval --draft D --num-prompt-count 4", False, "no option --num-prompt-count"),
        ("draftsmith export runs/x/final --format onnx --output-dir out/x", True, "invalid choice"),
        ("draftsmith plann configs/tiny/eagle3.yaml", True, "no command 'draftsmith plann'"),
        ("draftsmith plan configs/tiny/eagle3.yaml --data.max_lenght 4096", True, "unknown config key"),
        ("draftsmith features configs/tiny/eagle3.yaml --output f --data.max_lenght 4", True, "unknown config key"),
        ("draftsmith train configs/tiny/draft_lm.yaml --optim.lrr=1e-3", True, "unknown config key 'optim.lrr'"),
        ("draftsmith train configs/tiny/draft_lm.yaml --optim.lrr=1e-3", False, "no option --optim.lrr or recipe key"),
        ("draftsmith train configs/tiny/no_such.yaml", True, "does not exist"),
        (
            "accelerate launch --config_file configs/accelerate/nope.yaml -m draftsmith.train configs/tiny/eagle.yaml",
            True,
            "nope.yaml",
        ),
        (
            "accelerate launch --num_processes 2 -m draftsmith.train configs/tiny/eagle.yaml --drafter.nosie=1",
            True,
            "drafter.nosie",
        ),
        ("accelerate launch --num_processess 2 -m draftsmith.train configs/tiny/eagle.yaml", True, "num_processess"),
    ],
)
def test_the_checker_fails_on_a_broken_command(command, full, problem):
    problems = check_command(command, full)
    assert any(problem in p for p in problems), problems


def test_a_renamed_flag_in_a_real_doc_line_fails():
    """The checker, run on a line of the docs with one of its flags renamed, reports it."""
    line = next(c for _, c, full in all_commands() if full and " --num-prompts " in c)
    assert check_command(line) == []
    # (not a prefix of the real flag: argparse accepts unambiguous abbreviations)
    assert check_command(line.replace("--num-prompts", "--prompt-count")) != []


def named_paths(text: str) -> set[str]:
    """Repository paths named in code (fenced blocks and inline spans): scripts the results cite,
    recipes, test files, modules. Placeholders (<kind>, {url}, *) are not paths."""
    code = " ".join(FENCE.findall(text) + INLINE.findall(FENCE.sub("", text)))
    out = set()
    for token in re.split(r"[\s=]+", code):
        token = token.strip("`'\"()[],;:")
        if token.startswith(REPO_DIRS) and not re.search(r"[<{*]|\.\.\.", token):
            out.add(token)
    return out


def test_every_repository_path_the_pages_name_exists():
    missing = {page.name: sorted(p for p in named_paths(page.read_text()) if not (ROOT / p).exists()) for page in PAGES}
    assert {page: paths for page, paths in missing.items() if paths} == {}
    assert "scripts/bench_evidence.sh" in named_paths((ROOT / "docs" / "results.md").read_text())


def test_the_path_check_catches_a_missing_script():
    assert named_paths("run `python scripts/bench_gone.py --x 1` and `configs/<target>/eagle3.yaml`") == {
        "scripts/bench_gone.py"
    }


def _module_file(name: str, script: pathlib.Path) -> pathlib.Path | None:
    """The local file an import names: a sibling of the script, or a module of the package."""
    sibling = script.parent / f"{name}.py"
    if sibling.is_file():
        return sibling
    if name.startswith("draftsmith"):
        spec = importlib.util.find_spec(name)
        return pathlib.Path(spec.origin) if spec and spec.origin else None
    return None


def script_flags(script: pathlib.Path) -> set[str]:
    """Every `--flag` string in a script's source and in the local modules it imports (where a
    shared argument parser would live): read, not run, so no torch loads."""
    import ast

    flags, seen, todo = set(), set(), [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"--[\w-]+", node.value):
                flags.add(node.value)
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            todo += [f for f in (_module_file(n, script) for n in names) if f]
    return flags


def script_commands() -> list[tuple[str, str]]:
    """(page, command) for every `python scripts/X.py ...` the pages give."""
    out = []
    for page in PAGES:
        text = page.read_text()
        code = [*INLINE.findall(FENCE.sub("", text)), *"\n".join(FENCE.findall(text)).splitlines()]
        out += [(page.name, c.strip()) for c in code if re.match(r"\s*python3? scripts/\S+\.py", c)]
    return out


def check_script_command(command: str) -> list[str]:
    tokens = shlex.split(command, comments=True)
    script = ROOT / tokens[1]
    if not script.is_file():
        return [f"{tokens[1]}: no such script"]
    known = script_flags(script)
    flags = {t.split("=", 1)[0] for t in tokens[2:] if t.startswith("--")}
    return [f"{tokens[1]} has no option {f}" for f in sorted(flags - known)]


@pytest.mark.parametrize(("page", "command"), script_commands(), ids=lambda v: str(v)[:60])
def test_documented_script_command_has_those_options(page, command):
    assert check_script_command(command) == [], f"{page}: {command}"


def test_the_script_check_fails_on_a_renamed_option():
    command = next(c for _, c in script_commands() if "scripts/flop_bound.py" not in c and " --" in c)
    assert check_script_command(command) == []
    flag = re.search(r" (--[\w-]+)", command).group(1)
    assert check_script_command(command.replace(flag, flag + "-renamed")) != []


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_reference_names_every_recipe_key():
    reference = _hooks().config_reference()
    missing = [key for key in sorted(_recipe_keys()) if f"`{key}`" not in reference]
    assert missing == []


def test_generated_tables_list_every_recipe_and_kind():
    from draftsmith.kinds import KINDS

    hooks = _hooks()
    recipes, kinds = hooks.recipes(), hooks.kinds()
    for path in (ROOT / "configs").glob("*/*.yaml"):
        if path.parent.name != "accelerate":
            assert f"`{path.relative_to(ROOT)}`" in recipes
    for name in KINDS:
        assert f"| `{name}` |" in kinds
    page = hooks.on_page_markdown("a\n<!-- generated: kinds -->\nb")
    assert "generated" not in page and "| `eagle3` |" in page


def test_readme_kinds_table_matches_the_registry():
    """Each README row says what the registry declares: trains, vLLM and llama.cpp proven where
    crosscheck runs the kind, SGLang checked where the kind exports to it."""
    from draftsmith.kinds import KINDS

    section = (ROOT / "README.md").read_text().split("## Kinds and engines", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)`[^|]*\|(.+)\|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    unknown, missing = sorted(set(rows) - set(KINDS)), [k for k in KINDS if k not in rows]
    assert not unknown, f"README.md's kinds table has a row for a kind the registry does not know: {unknown}"
    assert not missing, f"README.md's kinds table has no row for the registered kind(s) {missing}"
    for name, (train, runtime, vllm, sglang, llamacpp, hub) in rows.items():
        kind = KINDS[name]
        assert (train == "yes") == kind.trainable, name
        assert runtime == "proven", name
        assert (vllm == "proven") == ("vllm" in kind.crosscheck), name
        assert (llamacpp == "proven") == ("llamacpp" in kind.crosscheck), name
        assert (sglang == "export checked") == ("sglang" in kind.exports), name
        assert (hub == "yes") == kind.trainable, name


def test_readme_is_the_short_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for command in ("bash scripts/quickstart.sh", "bash scripts/test.sh"):
        assert command in text
    assert "docs/results.md" in text and "docs/your-target.md" in text


def _slug(heading: str) -> str:
    """A heading's anchor as the site's toc extension writes it (Python-Markdown's slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_readme_links_reach_pages_and_headings():
    """The README is not part of the site, so mkdocs cannot check it: its links to files and to
    headings in docs/ are checked here (the site's own links: test_site_builds_strict)."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", (ROOT / "README.md").read_text())
    assert len(links) >= 10
    for path, anchor in links:
        if path.startswith(("http://", "https://")):
            continue
        assert (ROOT / path).exists(), path
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{path}#{anchor}"
    assert _slug("Real engines: the cross-check and the race") == "real-engines-the-cross-check-and-the-race"


WORK_LOG = re.compile(r"\bissues?\s*#?\d+|\bsessions?\b|\blent\b|\bPR\s*#?\d+", re.I)


def _help_texts() -> dict[str, str]:
    from draftsmith.cli import build_parser
    from draftsmith.train.__main__ import build_parser as train_parser

    parser = build_parser()
    out = {"draftsmith": parser.format_help(), "draftsmith train": train_parser().format_help()}
    for name, sub in _subparsers(parser).items():
        out[f"draftsmith {name}"] = sub.format_help()
    return out


def test_no_work_log_words_in_pages_or_help():
    texts = {p.name: p.read_text() for p in PAGES}
    texts["mkdocs.yml"] = (ROOT / "mkdocs.yml").read_text()
    texts.update(_help_texts())
    found = {name: WORK_LOG.findall(text) for name, text in texts.items()}
    assert {name: words for name, words in found.items() if words} == {}


def test_the_work_log_check_catches_them():
    for text in ("fixed in issue 17", "see issue #24", "in the next session", "no GPU lent"):
        assert WORK_LOG.search(text), text
    assert not WORK_LOG.search("the issue is the verify cost; a lentil; 17 sessionless")


def test_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed (pip install -e '.[test]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = (tmp_path / "recipes" / "index.html").read_text()
    assert "drafter.ttt_steps" in reference and "generated:" not in reference


def test_multi_machine_launches_name_the_total_process_count():
    """The multi-machine configs leave num_processes to the command: a line without it runs one process."""
    for page in PAGES:
        for line in page.read_text().splitlines():
            if line.startswith("accelerate launch") and "multinode_" in line:
                assert "--num_processes" in line, f"{page.name}: {line}"


def test_serving_the_docs_says_to_install_the_package():
    """docs/hooks.py imports draftsmith: mkdocs alone cannot build or serve the site."""
    for name in ("mkdocs.yml", "docs/architecture.md"):
        text = (ROOT / name).read_text()
        assert "mkdocs serve" in text and "pip install -e ." in text, name
    hooks = (ROOT / "docs" / "hooks.py").read_text()
    assert "def on_config" in hooks and "pip install -e ." in hooks


def test_the_commands_table_lists_every_command():
    from draftsmith.cli import build_parser

    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction)]
    table = (ROOT / "docs" / "getting-started.md").read_text().split("## The commands")[1]
    missing = [name for name in sub.choices if f"| `draftsmith {name}` |" not in table]
    assert missing == []
