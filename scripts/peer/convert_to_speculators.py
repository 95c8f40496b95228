"""Write speculators' offline EAGLE-3 training data from OUR data pipeline and OUR target, so that
the peer trainer (vllm-project/speculators 0.9) trains on exactly the rows, features, loss mask
and draft vocabulary that `draftsmith train RECIPE` uses. Runs under draftsmith's Python.

    python scripts/peer/convert_to_speculators.py configs/smollm2-135m-instruct/eagle3.yaml \
        --output runs/peer/spec-data [--max-rows N] [--val-rows N] [--hs-dtype bfloat16] [--a.b=value ...]

Overrides (`--data.max_rows=2000`, `--data.max_length=128`) are the recipe overrides
`draftsmith train` takes: give the same ones to both trainers.

What it writes into OUTPUT (speculators' `--data-path` layout):

    hidden_states/hs_{i}.safetensors  token_ids [T] int64, hidden_states [T, n_aux + 1, H]:
                                      HF hidden_states[a] for each aux layer a (= the INPUT of
                                      decoder layer a, = vLLM's aux layer id a), then the last
                                      decoder layer's output BEFORE the final norm (speculators
                                      applies the verifier norm + LM head itself)
    (HF datasets folder)              columns input_ids, loss_mask, seq_len (torch format):
                                      one row per conversation of our packed rows (its
                                      features computed as if alone, as our trainer reads
                                      them); rows [0, n_train) from our training rows, in our
                                      order; rows [n_train, N) from our held-out rows
                                      (speculators' validation split; train_data_ratio in meta.json)
    d2t-<V>.npy, t2d-<V>.npy          OUR draft vocabulary (models/eagle3.py frequent_tokens +
                                      vocab_maps over all training rows, EOS forced in), in
                                      speculators' convention (target id = i + d2t[i]; t2d bool)
    meta.json                         what the launcher needs (aux layers, ratio, vocab, target)

The loss mask is shifted by one: our loss_mask[t] marks token t as a target; speculators'
shift_batch scores the prediction of token t+1 under mask[t] (it pairs feature g_t, token x_{t+1},
the target's law y_{t+1} and mask l_{t+1}). Writing l'[t] = ours[t+1] makes both trainers score
exactly the same (position, step) pairs.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]

SPEC_PY = ROOT / ".engines" / "speculators" / "bin" / "python"


def parse():
    from draftsmith.evaluation.benchkit import parser

    ap = parser(__doc__, recipe={})
    ap.add_argument("--output", required=True)
    ap.add_argument("--max-rows", type=int, default=None, help="train rows to convert (default: all)")
    ap.add_argument("--val-rows", type=int, default=16, help="held-out rows for speculators' validation split")
    ap.add_argument("--hs-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--batch", type=int, default=4, help="rows per target forward")
    args, rest = ap.parse_known_args()
    return args, rest


def main() -> int:
    args, overrides = parse()
    from safetensors.torch import save_file

    from draftsmith.models import Target
    from draftsmith.models.documents import document_ids, forward_documents
    from draftsmith.models.eagle3 import frequent_tokens, vocab_maps
    from draftsmith.models.sources import resolve_model
    from draftsmith.train.config import load_recipe
    from draftsmith.train.data import build_data
    from draftsmith.train.tasks.eagle3 import aux_layers

    recipe = load_recipe(args.recipe, overrides)
    if recipe.drafter.kind != "eagle3":
        raise SystemExit(f"{args.recipe}: drafter.kind is {recipe.drafter.kind}, not eagle3")
    out = pathlib.Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    target = Target.load(recipe.model.target, dtype="float32", device="cpu")
    data = build_data(recipe.data, target.tokenizer, target=target, progress=False)
    train, held = data.train, data.eval
    aux = list(aux_layers(recipe.drafter, target.config))
    L = target.config.num_hidden_layers
    V = target.vocab_size
    size = min(recipe.drafter.draft_vocab_size, V)
    # Exactly Eagle3Task.bind_data: over ALL training rows, EOS ids always in.
    ids = frequent_tokens(train.input_ids, train.loss_mask, V, size, always=sorted(target.eos_token_ids))
    d2t, t2d = vocab_maps(ids, V)
    np.save(out / f"d2t-{size}.npy", d2t.numpy().astype(np.int64))
    np.save(out / f"t2d-{size}.npy", t2d.numpy().astype(bool))

    n_train = len(train) if args.max_rows is None else min(args.max_rows, len(train))
    n_val = min(args.val_rows, len(held))
    if n_val < 1:
        raise SystemExit("speculators needs a validation split: no held-out rows (raise data.eval_rows)")
    rows = [(train, i) for i in range(n_train)] + [(held, i) for i in range(n_val)]

    hs_dir = out / "hidden_states"
    hs_dir.mkdir(exist_ok=True)
    dtype = getattr(torch, args.hs_dtype)
    model = target.model
    captured = {}
    norm = model.model.norm  # the final norm: its input is the last layer's (pre-norm) output
    hook = norm.register_forward_pre_hook(lambda m, a: captured.__setitem__("pre_norm", a[0]))
    input_ids, loss_mask, seq_len = [], [], []
    n_train_items = 0  # speculators rows (conversations) that come from our training rows
    done = 0
    try:
        for start in range(0, len(rows), args.batch):
            chunk = rows[start : start + args.batch]
            batch = {
                k: torch.stack([getattr(ds, k)[i].long() for ds, i in chunk])
                for k in ("input_ids", "loss_mask", "attention_mask", "position_ids")
            }
            with torch.no_grad():  # each conversation of a packed row on its own, as our trainer reads it
                o = forward_documents(
                    model,
                    batch["input_ids"],
                    batch["position_ids"],
                    output_hidden_states=True,
                    use_cache=False,
                    logits_to_keep=1,
                )
            states = o.hidden_states
            assert len(states) == L + 1, (len(states), L)
            feats = torch.stack([states[a] for a in aux] + [captured["pre_norm"]], dim=2)  # [B, T, n+1, H]
            for r, _ in enumerate(chunk):
                # One speculators row per conversation: speculators packs its own rows, each
                # sequence on its own (a document mask), so ours are handed over unpacked.
                T = int(batch["attention_mask"][r].sum())
                docs = document_ids(batch["position_ids"][r : r + 1, :T])[0].tolist()
                for d in sorted(set(docs)):
                    a, b = docs.index(d), T - docs[::-1].index(d)
                    tok = batch["input_ids"][r, a:b].clone()
                    m = batch["loss_mask"][r, a:b]
                    shifted = torch.zeros(b - a, dtype=torch.long)
                    shifted[:-1] = m[1:]
                    save_file(
                        {"token_ids": tok, "hidden_states": feats[r, a:b].to(dtype).contiguous()},
                        str(hs_dir / f"hs_{len(seq_len)}.safetensors"),
                    )
                    input_ids.append(tok.tolist())
                    loss_mask.append(shifted.tolist())
                    seq_len.append(b - a)
                if start + r == n_train - 1:
                    n_train_items = len(seq_len)
            done += len(chunk)
            if start == 0 or done % 64 < args.batch or done == len(rows):
                el = time.perf_counter() - t0
                print(f"features: {done}/{len(rows)} rows ({el:.0f} s)", flush=True)
    finally:
        hook.remove()

    n_train, n_val = n_train_items, len(seq_len) - n_train_items  # conversations, not packed rows
    ratio = (n_train + 0.5) / len(seq_len)  # int(N * ratio) == n_train: speculators' split boundary
    assert int(len(seq_len) * ratio) == n_train
    rows_json = out / "rows.json"
    rows_json.write_text(json.dumps({"input_ids": input_ids, "loss_mask": loss_mask, "seq_len": seq_len}))
    target_dir = str(resolve_model(recipe.model.target).path)
    meta = {
        "recipe": str(args.recipe),
        "overrides": overrides,
        "target": recipe.model.target,
        "target_dir": target_dir,
        "target_layer_ids": aux,
        "num_hidden_layers": L,
        "hidden_size": target.config.hidden_size,
        "draft_vocab_size": size,
        "d2t": f"d2t-{size}.npy",
        "t2d": f"t2d-{size}.npy",
        "n_train": n_train,
        "n_val": n_val,
        "train_data_ratio": ratio,
        "max_length": recipe.data.max_length,
        "train_tokens": int(sum(seq_len[:n_train])),
        "hs_dtype": args.hs_dtype,
        "recipe_optim": {
            "lr": recipe.optim.lr,
            "batch_size": recipe.optim.batch_size,
            "warmup_steps": recipe.optim.warmup_steps,
            "max_steps": recipe.optim.max_steps,
        },
        "recipe_drafter": {
            "ttt_steps": recipe.drafter.ttt_steps,
            "ttt_decay": recipe.drafter.ttt_decay,
            "divergence": recipe.drafter.divergence,
        },
        "data_stats": data.stats,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    # The HF datasets folder is written by speculators' own `datasets` (its version cap differs
    # from ours), in speculators' venv.
    code = (
        "import json,sys,datasets;d=json.load(open(sys.argv[1]));"
        "ds=datasets.Dataset.from_dict(d);ds.set_format(type='torch');ds.save_to_disk(sys.argv[2])"
    )
    if not SPEC_PY.is_file():
        raise SystemExit(f"{SPEC_PY} missing: run bash scripts/peer/install_speculators.sh")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(SPEC_PY), "-I", "-c", code, str(rows_json), str(out)], check=True, env=env)
    print(
        f"wrote {out}: {n_train} train + {n_val} val rows, {meta['train_tokens']} train tokens, aux layers {aux}, "
        f"draft vocab {size} ({time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
