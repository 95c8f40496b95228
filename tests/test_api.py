"""The documented Python API (docs/python-api.md): every public name resolves from the top
package, `import draftsmith` loads no torch, and the page's example runs as written."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python-api.md"
HEAVY = ("torch", "transformers", "datasets", "accelerate")


def _python(code: str, cwd=ROOT, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def test_import_draftsmith_loads_no_torch():
    proc = _python(
        "import sys, draftsmith\n"
        "names = dir(draftsmith) + list(draftsmith.__all__)\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_a_name_loads_its_module_only_when_used():
    proc = _python(
        "import sys, draftsmith\n"
        "before = 'torch' in sys.modules\n"
        "draftsmith.Engine\n"
        "print(before, 'torch' in sys.modules)"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


def test_every_public_name_resolves():
    import draftsmith

    for name in draftsmith.__all__:
        assert getattr(draftsmith, name) is not None, name
    from draftsmith import SamplingConfig, SpecMetrics, export, train

    assert callable(train) and callable(export.export)
    assert SamplingConfig().temperature == 0.0
    assert SpecMetrics().mean_acceptance_length == 1.0


def test_names_point_at_their_modules():
    import draftsmith
    from draftsmith.infer import Engine
    from draftsmith.kinds import KINDS
    from draftsmith.models import Target, load_drafter
    from draftsmith.train.config import load_recipe

    assert draftsmith.Engine is Engine and draftsmith.Target is Target
    assert draftsmith.load_drafter is load_drafter and draftsmith.load_recipe is load_recipe
    assert draftsmith.KINDS is KINDS


def test_an_unknown_name_is_an_attribute_error():
    import draftsmith

    with pytest.raises(AttributeError, match="no attribute 'Enginee'"):
        draftsmith.Enginee  # noqa: B018


def test_the_page_imports_only_public_names():
    import draftsmith

    text = PAGE.read_text()
    names = set()
    for line in re.findall(r"^from draftsmith import (.+?)(?:\s+#.*)?$", text, re.M):
        names |= {n.strip() for n in line.split(",")}
    assert {"Target", "load_drafter", "Engine", "SamplingConfig", "load_recipe", "train", "export"} <= names
    assert names <= set(draftsmith.__all__), names - set(draftsmith.__all__)
    table = set(re.findall(r"^\| `(\w+)", text, re.M))
    assert len(table) >= 10 and table <= set(draftsmith.__all__), table - set(draftsmith.__all__)


def test_the_page_example_runs(tmp_path, tiny_cache):
    """The page's Python blocks, run in order as one script from a folder holding configs/:
    train a smoke draft, export it, load it with the target, generate, read the metrics."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    assert len(blocks) >= 2
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "example.py").write_text("\n".join(blocks))
    env = {**os.environ, "DRAFTSMITH_CACHE": str(tiny_cache), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "example.py"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "runs" / "tiny-draft" / "final" / "drafter.json").is_file()
    assert json.loads((tmp_path / "runs" / "tiny-draft-hf" / "draftsmith_export.json").read_text())["format"] == "hf"
    metrics = next(
        json.loads(line.replace("'", '"').replace("None", "null"))
        for line in proc.stdout.splitlines()
        if line.startswith("{'drafts'")
    )
    assert metrics["drafts"] >= 1
    assert metrics["mean_acceptance_length"] == pytest.approx(1 + metrics["accepted_tokens"] / metrics["drafts"])


def test_one_default_k_read_from_each_kind():
    """A K left out is the drafter's kind's `default_k`, at most what a capped drafter drafts."""
    from draftsmith.infer.proposal import Drafter, default_num_speculative_tokens
    from draftsmith.kinds import KINDS, Kind
    from draftsmith.models.base import default_num_speculative_tokens as for_kind

    for name, kind in KINDS.items():
        assert for_kind(name, None) == kind.default_k
        assert for_kind(name, 2) == min(kind.default_k, 2)

    class Stub(Drafter):  # the contract's default: its kind's default_k within its cap
        kind, max_speculative_tokens = "medusa", 3

    assert default_num_speculative_tokens(Stub()) == min(KINDS["medusa"].default_k, 3)
    # a drafter that says nothing: the registry's default, within its cap
    assert default_num_speculative_tokens(Drafter()) == Kind.default_k
    assert default_num_speculative_tokens(type("Capped", (Drafter,), {"max_speculative_tokens": 2})()) == min(
        2, Kind.default_k
    )


def test_the_page_signatures_match_the_code():
    """Target.load's documented dtype is the code's default; TreeConfig, documented, is exported."""
    import inspect

    import draftsmith
    from draftsmith.infer.tree import TreeConfig

    page = (ROOT / "docs" / "python-api.md").read_text()
    default = inspect.signature(draftsmith.Target.load).parameters["dtype"].default
    assert f'Target.load(name, dtype="{default}"' in page
    assert "`TreeConfig(" in page and draftsmith.TreeConfig is TreeConfig
