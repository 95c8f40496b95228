"""The results page and the README quote only what a stamped JSON under results/ records.

Every `results/....json` that docs/results.md or README.md cites must exist and carry a complete
stamp (the machine, the date, the commit and the command: what draftsmith/evaluation/report.py's
`stamp()` writes); every markdown table with a figure in docs/results.md must be followed, within
its section, by the path of such a file; and neither page uses work-log words. Pure Python: the
files are read as text and JSON, nothing is run.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ("docs/results.md", "README.md")

CITED = re.compile(r"(?<![\w/.-])(results/[\w./-]+?\.json)\b")
HEADING = re.compile(r"^#{1,6} ")
SEPARATOR = re.compile(r"^\|\s*:?-{3,}")
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?!\w)")  # a figure, not the digit of a name (eagle3)
WORK_LOG = re.compile(r"\bso far\b|\byet\b|later the same day|working tree|\bas above\b|\bnow\b", re.I)

# The stamp's four parts, by the keys that stamped files use: report.py's stamp() writes machine,
# commit, date and command; bench reports also carry the CPU as `cpu` and `hardware`.
STAMP = {
    "machine": ("machine", "cpu", "hardware"),
    "date": ("date",),
    "commit": ("commit",),
    "command": ("command",),
}


def cited_paths(text: str) -> list[str]:
    return sorted(set(CITED.findall(text)))


def stamp_problems(path: pathlib.Path) -> list[str]:
    """What is wrong with one cited JSON file: missing, unreadable, or a stamp part absent/empty."""
    if not path.is_file():
        return ["missing"]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [f"not JSON ({e})"]
    if not isinstance(data, dict):
        return ["not a JSON object"]
    # serve-bench keeps its stamp in one block: {"stamp": {"machine", "date", "git_commit", "command"}}
    nested = data.get("stamp") if isinstance(data.get("stamp"), dict) else {}
    nested = {**nested, "commit": nested.get("commit") or nested.get("git_commit")}
    return [f"no {part}" for part, keys in STAMP.items() if not any(data.get(k) or nested.get(k) for k in keys)]


def page_citation_problems(text: str, root: pathlib.Path) -> dict[str, list[str]]:
    problems = {p: stamp_problems(root / p) for p in cited_paths(text)}
    return {p: found for p, found in problems.items() if found}


def tables(text: str) -> list[tuple[int, int]]:
    """(first line, last line) of each markdown table: a header row, a |---| row, body rows."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and SEPARATOR.match(lines[i + 1].lstrip()):
            end = i + 1
            while end + 1 < len(lines) and lines[end + 1].lstrip().startswith("|"):
                end += 1
            out.append((i, end))
            i = end + 1
        else:
            i += 1
    return out


def uncited_tables(text: str) -> list[str]:
    """The header rows of the tables that hold a number in their body but are not followed by a
    `results/....json` path before the next heading."""
    lines, out = text.splitlines(), []
    for first, last in tables(text):
        body = "\n".join(lines[first + 2 : last + 1])
        if not NUMBER.search(body):
            continue
        rest = []
        for line in lines[last + 1 :]:
            if HEADING.match(line):
                break
            rest.append(line)
        if not CITED.search("\n".join(rest)):
            out.append(lines[first].strip())
    return out


# --- the real pages ------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_cited_json_exists_and_is_stamped(page):
    text = (ROOT / page).read_text()
    assert page_citation_problems(text, ROOT) == {}, page


def test_the_results_page_cites_json_at_all():
    assert len(cited_paths((ROOT / "docs/results.md").read_text())) >= 4


def test_every_results_table_with_figures_cites_its_json():
    assert uncited_tables((ROOT / "docs/results.md").read_text()) == []


@pytest.mark.parametrize("page", PAGES)
def test_no_work_log_words(page):
    assert WORK_LOG.findall((ROOT / page).read_text()) == [], page


# --- the checks themselves fail where they should ------------------------------------------------


STAMPED = {
    "machine": {"cpu": {"model": "AMD EPYC"}},
    "date": "2026-12-02 11:52 UTC",
    "commit": "b490ee2",
    "command": "x",
}


def _write(root: pathlib.Path, rel: str, data) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_the_check_passes_a_stamped_file_and_a_cited_table(tmp_path):
    _write(tmp_path, "results/a/run.json", STAMPED)
    page = "## A\n\n| m | τ |\n|---|---|\n| ours | 1.15 |\n\nJSON: `results/a/run.json`.\n"
    assert page_citation_problems(page, tmp_path) == {}
    assert uncited_tables(page) == []


def test_the_check_fails_on_a_missing_file(tmp_path):
    page = "figures: `results/a/gone.json`"
    assert page_citation_problems(page, tmp_path) == {"results/a/gone.json": ["missing"]}


@pytest.mark.parametrize("part", ["machine", "date", "commit", "command"])
def test_the_check_fails_on_an_incomplete_stamp(tmp_path, part):
    _write(tmp_path, "results/a/run.json", {k: v for k, v in STAMPED.items() if k != part})
    assert page_citation_problems("see results/a/run.json", tmp_path) == {"results/a/run.json": [f"no {part}"]}


def test_the_check_fails_on_an_empty_stamp_value_and_on_a_non_object(tmp_path):
    _write(tmp_path, "results/a/run.json", {**STAMPED, "commit": ""})
    _write(tmp_path, "results/a/list.json", [1, 2])
    assert page_citation_problems("results/a/run.json and results/a/list.json", tmp_path) == {
        "results/a/list.json": ["not a JSON object"],
        "results/a/run.json": ["no commit"],
    }


def test_the_check_fails_on_a_table_without_json_in_its_section():
    page = (
        "## A\n\n| m | τ |\n|---|---|\n| ours | 1.15 |\n\n"
        "## B\n\nJSON: `results/a/run.json`.\n\n| kind | train |\n|---|---|\n| eagle3 | yes |\n"
    )
    assert uncited_tables(page) == ["| m | τ |"]


def test_a_figure_is_a_number_not_the_digit_of_a_name():
    assert NUMBER.search("| ours | 0.73× |") and NUMBER.search("| 1,335 ms |")
    assert not NUMBER.search("| eagle3 | qwen2.5-coder | yes |")


def test_cited_paths_ignore_runs_and_nested_results_folders():
    text = "runs/qwen/results.json, out/results/x.json and `results/peer-race/race.json`"
    assert cited_paths(text) == ["results/peer-race/race.json"]


def test_the_work_log_check_catches_them():
    for text in ("the drafts trained so far", "not faster yet", "Later the same day", "this change's working tree"):
        assert WORK_LOG.search(text), text
    assert not WORK_LOG.search("a yeti knows; nowhere; the as-built layout")
