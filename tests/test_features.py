"""Target features for EAGLE (train/features/) on the tiny-random target and chitchat rows:
online = offline after the bf16 cast, refused mismatches, resumable extraction, cache size,
the command line, and a two-process extraction."""

import copy
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import DataConfig, load_recipe
from draftsmith.train.data import TokenRows, build_data, collate
from draftsmith.train.features import OfflineFeatures, OnlineFeatures, extract, extraction, target_hidden_states
from draftsmith.train.features import cli as features_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = (1, 2, -1)
D = 64  # tiny-random's hidden size


def chitchat(tiny_target, **kw):
    return build_data(DataConfig(path="chitchat", eval_rows=2, **kw), tiny_target.tokenizer, progress=False).train


@pytest.fixture(scope="module")
def packed(tiny_target):
    # Full rows: each file of the standard library, truncated to one (a packed row keeps a document
    # whole; tests/test_packing.py holds rows of several).
    data = DataConfig(path="stdlib", eval_rows=2, max_rows=24, max_length=64)
    return build_data(data, tiny_target.tokenizer, progress=False).train


@pytest.fixture(scope="module")
def padded(tiny_target):
    return chitchat(tiny_target, max_rows=24, max_length=128, pack=False)  # right-padded rows


@pytest.fixture(scope="module")
def cache(tiny_target, packed, tmp_path_factory):
    out = tmp_path_factory.mktemp("features") / "oneshot"
    extract(tiny_target, LAYERS, packed, out, max_length=64, shard_rows=8, progress=False)
    return out


def shard_tensors(folder) -> dict[str, torch.Tensor]:
    out = {}
    for path in sorted(pathlib.Path(folder).glob("shard-*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                assert key not in out, f"{key} stored twice"
                out[key] = f.get_tensor(key)
    return out


# --- online = offline ----------------------------------------------------------------------------


@pytest.mark.parametrize("rows_fixture, width", [("packed", 64), ("padded", 128)])
def test_offline_features_equal_online_ones_cast_to_bf16(rows_fixture, width, tiny_target, request, tmp_path):
    rows = request.getfixturevalue(rows_fixture)
    manifest = extract(tiny_target, LAYERS, rows, tmp_path, max_length=width, shard_rows=4, progress=False)
    assert manifest["num_rows"] == len(rows) and manifest["layers"] == list(LAYERS)
    online, offline = OnlineFeatures(tiny_target, LAYERS), OfflineFeatures(tmp_path, tiny_target, LAYERS, width, rows)
    short = int(rows.attention_mask.sum(1).argmin())  # the padded case's most padded row
    for idx in ([0, 1, 2, 3], [len(rows) - 1, short, 2]):  # an extraction batch, then a shuffled one across shards
        batch = collate([rows[i] for i in idx])
        assert batch["row"].tolist() == idx
        a, b = online(batch, want_logits=True), offline(batch, want_logits=True)
        assert a.hidden.shape == b.hidden.shape == (len(idx), width, len(LAYERS) * D)
        assert b.hidden.dtype == tiny_target.dtype and a.logits.shape == b.logits.shape
        real = batch["attention_mask"].bool()
        if idx == [0, 1, 2, 3]:  # the very batch extraction ran: equal after the cast, bit for bit
            assert torch.equal(a.hidden.to(torch.bfloat16)[real], b.hidden.to(torch.bfloat16)[real])
        else:
            torch.testing.assert_close(a.hidden[real], b.hidden[real], rtol=1 / 128, atol=1e-3)
        assert not b.hidden[~real].any()  # padding comes back as zeros
        torch.testing.assert_close(b.logits[real], a.logits[real], rtol=0.02, atol=0.1)
        assert (a.logits[real].argmax(-1) == b.logits[real].argmax(-1)).float().mean() > 0.97
        assert offline(batch).logits is None
    assert real.all() == (rows_fixture == "packed")  # the padded case really has padding


def test_online_features_are_the_chosen_hidden_states(tiny_target, packed):
    batch = collate([packed[i] for i in range(2)])
    out = tiny_target.model(input_ids=batch["input_ids"], output_hidden_states=True)
    f = OnlineFeatures(tiny_target, (2, 0, -1))(batch)
    assert f.logits is None and not f.hidden.requires_grad
    assert torch.equal(f.hidden, torch.cat([out.hidden_states[i] for i in (2, 0, -1)], dim=-1))
    # -1 is the LM head's input: the last layer after the final norm
    torch.testing.assert_close(tiny_target.model.lm_head(f.hidden[..., -D:]), out.logits)


def test_layer_out_of_range_is_named(tiny_target, packed):
    msg = r"hidden layer 9 but tiny-random has 9 hidden states \(indices -9..8\)"
    with pytest.raises(DraftsmithError, match=msg):
        OnlineFeatures(tiny_target, (2, 9))
    batch = collate([packed[0]])
    with pytest.raises(DraftsmithError, match=r"hidden layer -10 .* \(indices -9..8\)"):
        target_hidden_states(tiny_target.model, batch["input_ids"], batch["attention_mask"], [-10], name="tiny-random")


# --- refusing a cache made for something else ----------------------------------------------------


def test_mismatched_cache_is_refused_naming_each_key(tiny_target, packed, cache):
    with pytest.raises(DraftsmithError, match=r"written for layers \[1, 2, -1\] \(this run: \[1, 3, -1\]\)"):
        OfflineFeatures(cache, tiny_target, (1, 3, -1), 64, packed)
    with pytest.raises(DraftsmithError, match=r"max_length 64 \(this run: 128\)"):
        OfflineFeatures(cache, tiny_target, LAYERS, 128, packed)
    fewer = TokenRows(packed.input_ids[:-1], packed.loss_mask[:-1], packed.attention_mask[:-1])
    with pytest.raises(DraftsmithError, match="dataset_fingerprint") as e:
        OfflineFeatures(cache, tiny_target, (1, 2), 64, fewer)
    assert "layers [1, 2, -1] (this run: [1, 2])" in str(e.value)  # one message, every differing key
    other = copy.copy(tiny_target)
    other.name = "tiny-other"
    with pytest.raises(DraftsmithError, match=r'target "tiny-random" \(this run: "tiny-other"\)'):
        OfflineFeatures(cache, other, LAYERS, 64, packed)
    changed = copy.deepcopy(tiny_target)  # same name, other weights
    with torch.no_grad():
        changed.model.lm_head.weight[0, 0] += 1
    with pytest.raises(DraftsmithError, match="revision"):
        OfflineFeatures(cache, changed, LAYERS, 64, packed)
    inner = copy.deepcopy(tiny_target)  # the readers equal, a decoder layer not: the whole-weights hash says so
    with torch.no_grad():
        inner.model.model.layers[0].mlp.up_proj.weight[0, 0] += 1
    with pytest.raises(DraftsmithError, match="weights"):
        OfflineFeatures(cache, inner, LAYERS, 64, packed)
    # extracting into the same folder with other settings is refused the same way
    with pytest.raises(DraftsmithError, match=r"layers \[1, 2, -1\] \(this run: \[2, -1\]\).*another --output"):
        extract(tiny_target, (2, -1), packed, cache, max_length=64, shard_rows=8, progress=False)
    with pytest.raises(DraftsmithError, match=r"shard_rows 8 \(this run: 4\)"):
        extract(tiny_target, LAYERS, packed, cache, max_length=64, shard_rows=4, progress=False)


def test_a_cache_of_an_older_format_is_refused_in_words(tiny_target, packed, cache, tmp_path):
    """Format 2 stored features computed across a packed row's conversations: read as format 3's
    they would mislead training, so the cache is refused, whatever else it matches."""
    old = tmp_path / "old"
    shutil.copytree(cache, old)
    for name in ("manifest.json", "settings.json"):
        meta = json.loads((old / name).read_text())
        (old / name).write_text(json.dumps(meta | {"format": 2}))
    with pytest.raises(DraftsmithError, match=r"has format 2, this draftsmith reads format 3 .*re-extract") as e:
        OfflineFeatures(old, tiny_target, LAYERS, 64, packed)
    assert "layers" not in str(e.value)  # the format alone: the other keys agree
    with pytest.raises(DraftsmithError, match=r"has format 2, .*another --output folder"):
        extract(tiny_target, LAYERS, packed, old, max_length=64, shard_rows=8, progress=False)


def test_missing_or_corrupt_files_are_named(tiny_target, packed, cache, tmp_path):
    with pytest.raises(DraftsmithError, match=r"no manifest.json .*draftsmith.train.features"):
        OfflineFeatures(tmp_path / "nothing", tiny_target, LAYERS, 64, packed)
    broken = tmp_path / "broken"
    shutil.copytree(cache, broken)
    (broken / "shard-00001.safetensors").write_bytes(b"not a safetensors file")
    f = OfflineFeatures(broken, tiny_target, LAYERS, 64, packed)
    f(collate([packed[0]]))  # shard 0 is fine
    with pytest.raises(DraftsmithError, match="shard-00001.safetensors: unreadable feature shard"):
        f(collate([packed[9]]))
    (broken / "shard-00002.safetensors").unlink()
    with pytest.raises(DraftsmithError, match="shard-00002.safetensors is missing"):
        OfflineFeatures(broken, tiny_target, LAYERS, 64, packed)
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(DraftsmithError, match="manifest.json: unreadable"):
        OfflineFeatures(broken, tiny_target, LAYERS, 64, packed)


def test_logits_need_the_last_layer(tiny_target, packed, tmp_path):
    extract(tiny_target, (1, 2), packed, tmp_path, max_length=64, shard_rows=64, progress=False)
    f = OfflineFeatures(tmp_path, tiny_target, (1, 2), 64, packed)
    batch = collate([packed[0]])
    assert f(batch).hidden.shape == (1, 64, 2 * D)
    with pytest.raises(DraftsmithError, match="not the last layer"):
        f(batch, want_logits=True)


# --- resuming and size ---------------------------------------------------------------------------


def test_interrupted_extraction_resumes_without_rewriting(tiny_target, packed, cache, tmp_path, monkeypatch):
    write, calls = extraction._write_shard, []

    def dies_after_two(path, tensors, metadata):
        if len(calls) == 2:
            raise KeyboardInterrupt  # a kill between shards
        calls.append(path.name)
        write(path, tensors, metadata)

    monkeypatch.setattr(extraction, "_write_shard", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        extract(tiny_target, LAYERS, packed, tmp_path, max_length=64, shard_rows=8, progress=False)
    monkeypatch.setattr(extraction, "_write_shard", write)
    done = sorted(tmp_path.glob("shard-*.safetensors"))
    assert [p.name for p in done] == calls == ["shard-00000.safetensors", "shard-00001.safetensors"]
    assert not (tmp_path / "manifest.json").exists()
    (tmp_path / "shard-00002.safetensors.tmp").write_bytes(b"half a shard")  # killed mid-write
    stamps = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in done}

    manifest = extract(tiny_target, LAYERS, packed, tmp_path, max_length=64, shard_rows=8, progress=False)
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in done} == stamps  # not rewritten
    assert not list(tmp_path.glob("*.tmp"))
    ranges = [tuple(s["rows"]) for s in manifest["shards"]]
    assert ranges == [(lo, min(lo + 8, len(packed))) for lo in range(0, len(packed), 8)]
    resumed, oneshot = shard_tensors(tmp_path), shard_tensors(cache)
    assert sorted(resumed) == sorted(f"row.{i}" for i in range(len(packed)))  # every row exactly once
    assert all(torch.equal(resumed[k], oneshot[k]) for k in oneshot)
    assert manifest == json.loads((cache / "manifest.json").read_text()) | {"bytes": manifest["bytes"]}


@pytest.mark.parametrize("rows_fixture, width", [("packed", 64), ("padded", 128)])
def test_cache_stores_only_real_tokens_in_bf16(rows_fixture, width, tiny_target, request, tmp_path, capsys):
    rows = request.getfixturevalue(rows_fixture)
    m = extract(tiny_target, LAYERS, rows, tmp_path, max_length=width, shard_rows=4, progress=False)
    real = int(rows.attention_mask.sum())
    assert m["num_tokens"] == real and m["dtype"] == "bfloat16"
    assert m["bytes"] == sum(p.stat().st_size for p in tmp_path.glob("shard-*.safetensors"))
    ideal = real * len(LAYERS) * D * 2
    with capsys.disabled():
        print(
            f"\n[{rows_fixture}] {len(rows)} rows, {real} real of {rows.attention_mask.numel()} tokens: "
            f"{m['bytes']} bytes = {m['bytes'] / ideal:.4f} x ideal"
        )
    assert m["bytes"] <= 1.1 * ideal
    t = shard_tensors(tmp_path)
    assert all(v.dtype == torch.bfloat16 for v in t.values())
    assert [t[f"row.{i}"].shape[0] for i in range(len(rows))] == rows.attention_mask.sum(1).tolist()


# --- data plumbing and the command line ----------------------------------------------------------


def test_row_index_survives_accelerate_prepare(packed, fresh_accelerate):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    loader = acc.prepare(torch.utils.data.DataLoader(packed, batch_size=4, shuffle=True, collate_fn=collate))
    batch = next(iter(loader))
    assert batch["row"].shape == (4,)
    for row, ids in zip(batch["row"].tolist(), batch["input_ids"]):
        assert torch.equal(ids, packed.input_ids[row].long())


def test_cli_refuses_a_drafter_without_features_and_bad_layers(tiny_cache, tmp_path, capsys, fresh_accelerate):
    medusa = str(ROOT / "configs" / "tiny" / "medusa.yaml")
    quick = ["--data.max_rows=3", "--data.max_length=64", "--logging.progress=false"]
    assert features_cli.main([medusa, "--output", str(tmp_path), *quick]) == 2
    assert "drafter kind medusa does not read target hidden states; nothing to extract" in capsys.readouterr().err
    assert features_cli.main([medusa, "--output", str(tmp_path), "--layers", "2,99", *quick]) == 2
    assert "hidden layer 99 but tiny-random has 9 hidden states" in capsys.readouterr().err


def test_two_processes_write_shards_that_one_manifest_joins(tiny_cache, tiny_target, tmp_path):
    # Text files, each a full row: enough rows for shards on both ranks.
    overrides = ["--data.path=stdlib", "--data.max_rows=24", "--data.max_length=64", "--logging.progress=false"]
    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs" / "accelerate" / "ddp.yaml"),
        "--num_processes",
        "2",
        "-m",
        "draftsmith.train.features",
        str(ROOT / "configs" / "tiny" / "medusa.yaml"),
        "--output",
        str(out),
        "--layers=1,2,-1",
        "--shard-rows",
        "8",
        *overrides,
    ]
    # Two CPU ranks over gloo, also on a machine with a GPU: `accelerate launch --cpu` would start
    # one process only, and a visible GPU makes the ranks pick NCCL barriers.
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    ranks = {}
    for s in manifest["shards"]:
        with safe_open(str(out / s["file"]), framework="pt") as f:
            ranks[s["file"]] = f.metadata()["rank"]
            assert sorted(f.keys()) == sorted(f"row.{i}" for i in range(*s["rows"]))
    assert set(ranks.values()) == {"0", "1"}
    assert all(r == str(i % 2) for i, r in enumerate(ranks[k] for k in sorted(ranks)))  # chunk i by rank i % 2
    # the same rows and features as a single-process extraction of that recipe's data
    rows = build_data(
        load_recipe(ROOT / "configs" / "tiny" / "medusa.yaml", overrides).data, tiny_target.tokenizer, progress=False
    ).train
    single = extract(tiny_target, LAYERS, rows, tmp_path / "single", max_length=64, shard_rows=8, progress=False)
    assert {k: v for k, v in manifest.items() if k != "bytes"} == {k: v for k, v in single.items() if k != "bytes"}
    a, b = shard_tensors(out), shard_tensors(tmp_path / "single")
    assert sorted(a) == sorted(b)
    for k in a:
        torch.testing.assert_close(a[k].float(), b[k].float(), rtol=1 / 64, atol=1e-3)


def test_logit_rows_compute_the_target_head_on_those_positions_only(tiny_target):
    """Issue 17: EAGLE training reads the target's law at the rows its steps are scored on;
    the LM head runs there only, online and from an offline cache alike (logits [N, V] and
    an index from (b, t) to its row)."""
    from draftsmith.train.features import OnlineFeatures, row_index

    g = torch.Generator().manual_seed(1)
    batch = {
        "input_ids": torch.randint(0, 200, (2, 10), generator=g),
        "attention_mask": torch.ones(2, 10, dtype=torch.long),
    }
    rows = torch.zeros(2, 10, dtype=torch.bool)
    rows[0, [1, 4]] = rows[1, 9] = True
    feats = OnlineFeatures(tiny_target, (1, -1))
    full, some = feats(batch, want_logits=True), feats(batch, want_logits=True, logit_rows=rows)
    torch.testing.assert_close(some.hidden, full.hidden)
    torch.testing.assert_close(some.logits, full.logits[rows])
    assert some.logit_index.tolist() == row_index(rows).tolist()
    assert row_index(rows)[0].tolist() == [-1, 0, -1, -1, 1, -1, -1, -1, -1, -1] and row_index(rows)[1, 9] == 2
    assert full.logit_index is None
