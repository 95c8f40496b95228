"""`draftsmith plan` on a fresh machine: a recipe whose draft starts from a GGUF built-in that no run
has converted yet (configs/qwen2.5-coder-1.5b-instruct/{draft_lm,draft_lm_chat,pard}.yaml right
after scripts/install_qwen.sh) plans, converting the built-in once on the real device, not on the
meta device the drafter is planned on. A tiny stand-in built-in (a GGUF written from tiny-random,
in a fake installed package) takes the place of the 0.5B here."""

import dataclasses
import hashlib
import json
import pathlib

import pytest
import yaml
from test_loading import _write_gguf

from draftsmith import cli
from draftsmith.models import cache_folder as C
from draftsmith.models import sources as L

STAND_IN = "stand-in-0.5b"
QWEN = pathlib.Path(__file__).resolve().parents[1] / "configs" / "qwen2.5-coder-1.5b-instruct"


@pytest.fixture
def fresh_builtin(tiny_cache, tmp_path, monkeypatch):
    """A GGUF built-in `STAND_IN` in an empty draftsmith cache; returns tiny-random's folder (the
    target) and the built-in."""
    target = L.resolve_model("tiny-random").path  # built in the session's cache, before the switch
    tok, model = L.load_tokenizer(target), L.load_causal_lm(target)
    package = tmp_path / "site" / "stand_in_part1"
    (package / "data").mkdir(parents=True)
    gguf = package / "data" / "part01.bin"
    _write_gguf(model, tok, gguf)
    builtin = L.Builtin(
        STAND_IN,
        "example/stand-in",
        "a test's stand-in",
        parts=(("stand_in_part1", "data/part01.bin"),),
        sha256=hashlib.sha256(gguf.read_bytes()).hexdigest(),
        pip="pip install stand-in-part1==0",
    )
    monkeypatch.setitem(L.BUILTINS, STAND_IN, builtin)
    real = L._find_package_dir
    monkeypatch.setattr(L, "_find_package_dir", lambda m: package if m == "stand_in_part1" else real(m))
    monkeypatch.setenv(C.CACHE_ENV, str(tmp_path / "empty-cache"))
    return target, builtin


@pytest.mark.parametrize("kind", ["draft_lm", "pard"])
def test_a_recipe_plans_with_an_unconverted_builtin_draft(fresh_builtin, tmp_path, capsys, kind):
    recipe = {
        "model": {"target": fresh_builtin[0]},
        # pard: tiny-random's byte-level vocabulary has no spare token; 258 is byte 0xFF, never in UTF-8.
        "drafter": {"kind": kind, "init": STAND_IN, **({"mask_token": 258} if kind == "pard" else {})},
        "data": {"path": "stdlib", "max_length": 64},
        "optim": {"max_steps": 2, "batch_size": 1},
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert not (tmp_path / "empty-cache" / "models" / STAND_IN).exists()
    code = cli.main(["plan", str(path), "--gpu-memory", "80GB", "--json", str(tmp_path / "plan.json")])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "meta" not in err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["drafter_params"] > 0
    # The conversion happened once, for real (weights on disk, not meta tensors), and is reused.
    converted = tmp_path / "empty-cache" / "models" / STAND_IN
    assert C.is_complete(converted) and (converted / "model.safetensors").stat().st_size > 100_000
    assert cli.main(["plan", str(path), "--gpu-memory", "80GB"]) == 0


@pytest.mark.parametrize("recipe", sorted(p.name for p in QWEN.glob("*.yaml")))
def test_every_qwen_coder_recipe_plans_right_after_install(fresh_builtin, monkeypatch, capsys, recipe):
    """configs/qwen2.5-coder-1.5b-instruct/*.yaml as shipped, right after scripts/install_qwen.sh: both
    built-ins installed (here: the stand-in under their names), neither converted yet."""
    for name in ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"):
        monkeypatch.setitem(L.BUILTINS, name, dataclasses.replace(fresh_builtin[1], name=name))
    extra = ["--drafter.mask_token=258"] if recipe == "pard.yaml" else []  # tiny-random has no spare token
    code = cli.main(["plan", str(QWEN / recipe), "--gpus", "1", *extra])
    err = capsys.readouterr().err
    assert code == 0 and "meta" not in err, err[-2000:]
    models = pathlib.Path(L.cache_dir()) / "models"
    assert C.is_complete(models / "qwen2.5-coder-1.5b-instruct")
    if recipe.startswith(("draft_lm", "pard")):  # drafts initialised from the 0.5B: converted on the CPU
        assert C.is_complete(models / "qwen2.5-coder-0.5b-instruct")
