"""The `references` tier's plumbing, in the default tier: the installer refuses an unknown
reference in one line, a test whose reference is absent skips naming the command that installs
it, and the default test command leaves the tier out."""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest
from test_references import run_reference

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_installer_refuses_an_unknown_reference(tmp_path):
    run = subprocess.run(
        ["bash", "scripts/install_references.sh", "no-such-trainer"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "DRAFTSMITH_REFERENCES": str(tmp_path / "refs")},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    assert (
        run.stderr.strip() == "unknown reference: no-such-trainer (speculators | eagle | medusa | dflash | specforge)"
    )
    assert not any((tmp_path / "refs").iterdir())


def test_an_absent_reference_skips_with_its_install_command(tmp_path):
    with pytest.raises(pytest.skip.Exception, match=r"bash scripts/install_references.sh no-such-trainer"):
        run_reference("no-such-trainer", "speculators_eagle3.py", {}, tmp_path)
    assert not (tmp_path / "case.pt").exists()


def test_the_default_tier_leaves_the_references_out():
    assert re.search(r'^  "references: ', (ROOT / "pyproject.toml").read_text(), re.M), "marker not registered"
    default = re.search(r'set -- -m "([^"]+)"', (ROOT / "scripts" / "test.sh").read_text()).group(1)
    assert "not references" in default
