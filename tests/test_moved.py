"""Modules that moved keep their old import paths for one release (draftsmith/_moved.py): the old
name is the moved module itself (one object: classes and state are shared), importing it warns
with the new name, and `python -m OLD` still runs the moved command."""

import importlib
import subprocess
import sys

import pytest

from draftsmith._moved import MOVED, new_name


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_moved_module_and_warns(old):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old]  # the alias does not rename the module


def test_a_submodule_under_a_moved_package_is_the_same_object():
    for name in ("draftsmith.export", "draftsmith.export.vllm"):
        sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning):
        from draftsmith.export import vllm as old
    from draftsmith.shipping.export import vllm as new

    assert old is new
    assert new_name("draftsmith.export.vllm") == "draftsmith.shipping.export.vllm"
    assert new_name("draftsmith.exporter") is None and new_name("draftsmith.kinds") is None


def test_the_documented_export_name_does_not_warn():
    import warnings

    import draftsmith

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert draftsmith.export.export is importlib.import_module("draftsmith.shipping.export").export


def test_python_dash_m_runs_a_moved_command_under_its_old_name():
    out = subprocess.run(
        [sys.executable, "-m", "draftsmith.train.features_cli", "--help"], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    assert "--output" in out.stdout
