"""What the README's install lines promise: a GPU user's current torch is admitted (not
downgraded), the extras the page names exist, and MT-Bench's line is the one the loader asks for."""

import pathlib
import re

import pytest
from packaging.requirements import Requirement

from draftsmith.evaluation.prompts import STANDARD_SETS

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = pathlib.Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_torch_range_admits_current_releases_and_the_cpu_wheel():
    (torch,) = [Requirement(r) for r in PROJECT["dependencies"] if r.startswith("torch")]
    for version in ("2.13.0", "2.15.0", "2.16.1", "2.20.0"):
        assert torch.specifier.contains(version), version
    assert not torch.specifier.contains("2.3.1")
    for script in ("setup.sh", "test.sh", "quickstart.sh"):  # the CPU scripts pin the wheel first
        text = (ROOT / "scripts" / script).read_text()
        assert "torch==2.13.0" in text or "setup.sh" in text, script


def test_the_install_lines_name_extras_that_exist():
    text = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    named = {e for spec in re.findall(r'"\.\[([a-z,]+)\]"', text) for e in spec.split(",")}
    assert {"train", "bench"} <= named <= set(PROJECT["optional-dependencies"])
    extras = PROJECT["optional-dependencies"]
    assert any(r.startswith("openai") for r in extras["regenerate"]) and "regenerate" in extras["train"][0]
    assert [f"pip install {r}" for r in extras["bench"]] == [STANDARD_SETS["humaneval"].pip.replace("--no-deps ", "")]
    assert STANDARD_SETS["mt-bench"].pip in text
