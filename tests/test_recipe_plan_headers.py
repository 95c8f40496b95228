"""A recipe's header quotes what `draftsmith plan` prints for it; the quote cannot go stale.

Recipes that carry a plan in their header comment name the command and its machine on one line
and quote its one-line summary on the next:

    # Plan:       draftsmith plan configs/qwen3-8b/eagle3.yaml (8 x 80 GB, 989 TFLOP/s x 0.4)
    #   plan: Qwen/Qwen3-8B 8.19B frozen + eagle3 399.5M trained; fits with ...

Each such recipe is planned again here (in process, on the meta device, offline: a few seconds for
all of them) and the quoted line must be the one plan prints. When the plan changes, rerun the
command on the `Plan:` line and paste its last line.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMAND = re.compile(
    r"^#\s+Plan:\s+draftsmith plan (?P<recipe>\S+) "
    r"\((?P<gpus>\d+) x (?P<memory>[\d.]+) GB, (?P<tflops>[\d.]+) TFLOP/s x (?P<util>[\d.]+)\)\s*$",
    re.M,
)
QUOTE = re.compile(r"^#\s+(plan: .*?)\s*$", re.M)


def headers() -> list[tuple[str, re.Match | None, str]]:
    """(recipe, its `Plan:` command line, its quoted `plan:` line) for every recipe quoting a plan."""
    out = []
    for path in sorted((ROOT / "configs").glob("*/*.yaml")):
        text = path.read_text()
        quote = QUOTE.search(text)
        if quote:
            out.append((path.relative_to(ROOT).as_posix(), COMMAND.search(text), quote.group(1)))
    return out


def printed_plan(recipe: str, gpus: str, memory: str, tflops: str, util: str) -> str:
    """The `plan: ...` line `draftsmith plan` prints for the recipe on that machine (run from the
    repository root: the recipe path is relative to it)."""
    from draftsmith.cli import main

    argv = ["plan", recipe, "--gpus", gpus, "--gpu-memory", f"{memory}GB", "--gpu-tflops", tflops]
    argv += ["--utilisation", util]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0, recipe
    lines = [line for line in out.getvalue().splitlines() if line.startswith("plan: ")]
    assert lines, f"draftsmith plan {recipe} printed no 'plan:' line"
    return lines[-1]


HEADERS = headers()


def test_the_gpu_recipes_quote_their_plan():
    assert len(HEADERS) >= 7
    assert {"configs/llama-3.1-8b-instruct/eagle3.yaml", "configs/llama-3.3-70b-instruct/eagle3.yaml"} <= {
        recipe for recipe, _, _ in HEADERS
    }


@pytest.mark.parametrize(("recipe", "command", "quoted"), HEADERS, ids=[h[0] for h in HEADERS])
def test_quoted_plan_is_what_plan_prints(recipe, command, quoted, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert command is not None, f"{recipe} quotes a plan but has no '# Plan: draftsmith plan ... (N x M GB, ...)' line"
    assert command["recipe"] == recipe, f"{recipe}'s Plan: line plans {command['recipe']}"
    printed = printed_plan(recipe, command["gpus"], command["memory"], command["tflops"], command["util"])
    assert quoted == printed, (
        f"{recipe}'s header quotes\n  {quoted}\nbut `draftsmith plan {recipe}` prints\n  {printed}"
    )


def test_the_check_reads_a_header():
    text = (
        "# Plan:       draftsmith plan configs/x/y.yaml (8 x 80 GB, 989 TFLOP/s x 0.4)\n"
        "#   plan: T 1B frozen + eagle3 1M trained; fits with ddp\n"
    )
    m = COMMAND.search(text)
    assert (m["recipe"], m["gpus"], m["memory"], m["tflops"], m["util"]) == (
        "configs/x/y.yaml",
        "8",
        "80",
        "989",
        "0.4",
    )
    assert QUOTE.search(text).group(1) == "plan: T 1B frozen + eagle3 1M trained; fits with ddp"
    assert not QUOTE.search("# Plan:       draftsmith plan configs/x/y.yaml\n# 96 GB per GPU (the plan).\n")
