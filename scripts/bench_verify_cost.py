#!/usr/bin/env python
"""What one verification forward costs, chain vs tree, eager vs compiled: the number that decides
whether a tree pays. Randomly initialised models of real shapes (no download needed), so the
costs are real and the acceptance is not measured here (take τ from `draftsmith eval`):

    predicted speedup = τ · t_step / (t_propose + t_verify)   (Leviathan et al. 2023, Thm 3.8)

For each model shape and each of eager / compiled (CUDA graphs, CUDA only): the median time of a
plain decode step (q = 1), of verifying chains of k+1 tokens and trees of n+1 tokens (tree
attention mask, tree positions) at a given context length, and of a Medusa and an EAGLE-3
drafter's propose (untrained weights: same cost as trained ones; EAGLE-3 with dynamic trees).
Prints a table, writes JSON.

    python scripts/bench_verify_cost.py --shapes smollm2-135m,llama-1b --context 512 --out runs/bench/verify_cost.json
"""

import statistics
import time

import torch

from draftsmith.evaluation.benchkit import add_flags, machine_line, parser, run_main, save
from draftsmith.infer.hardware import auto_dtype, cpu_info, use_affinity_threads
from draftsmith.infer.sampling import GREEDY
from draftsmith.infer.tree import Tree, TreeConfig, choices_from_accuracies
from draftsmith.models import Target
from draftsmith.models.eagle import EagleConfig
from draftsmith.models.eagle3 import Eagle3, Eagle3Config, Eagle3Model, default_aux_layers
from draftsmith.models.medusa import Medusa, MedusaHeads, prior_accuracies

SHAPES = {  # LlamaConfig keyword arguments
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=259,
    ),
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        tie_word_embeddings=True,
    ),
    "llama-1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=True,
    ),
    "llama-3.1-8b": dict(  # configs/llama-3.1-8b-instruct/config.json (rope scaling changes no cost)
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=False,
    ),
}


def timed(fn, repeats: int, device) -> float:
    times = []
    for i in range(repeats + 3):  # 3 warm-ups: compilation and graph capture happen there
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def random_model(shape: str, device, dtype):
    """A seeded, randomly initialised Llama of one of SHAPES (also used by bench_engine.py), built
    where it runs, in `dtype`: an 8B shape initialised in host memory in fp32 would take 32 GB of
    RAM and a minute of copying before the first measurement."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(max_position_embeddings=4096, **SHAPES[shape])
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def measure(shape: str, compile: bool, context: int, chains, trees, repeats: int, device, dtype, flush=None) -> dict:
    """One row of costs; `flush(row)` after every figure, so a run stopped by a time limit keeps
    what it measured."""
    flush = flush or (lambda row: None)
    model = random_model(shape, device, dtype)
    config = model.config
    target = Target(model, None, f"random {shape}", compile=compile)
    max_length = 1024 * ((context + 200) // 1024 + 1)
    prompt = torch.randint(0, config.vocab_size, (1, context), device=device)
    cache = target.new_cache(max_length)
    _, hidden = target.forward_hidden(prompt, cache, logits_to_keep=1, hidden_layers=(-1,))
    base = cache.length
    row = {"shape": shape, "compiled": compile, "context": context, "dtype": str(dtype).removeprefix("torch.")}

    def step(tree: Tree):
        q = tree.num_nodes + 1
        ids = prompt[:, -q:].contiguous()
        pos = None if tree.is_chain else tree.position_ids(base, device)
        mask = None if tree.is_chain else tree.attention_mask(base, cache.kv_length(q), dtype, device)

        def run():
            target.forward_hidden(ids, cache, pos, mask, hidden_layers=(-1,))
            cache.crop(base)

        return run

    row["t_step"] = timed(step(Tree.chain(0)), repeats, device)
    flush(row)
    for k in chains:
        row[f"t_verify_chain{k}"] = timed(step(Tree.chain(k)), repeats, device)
        flush(row)
    with torch.device(device):  # the drafters too: full-vocabulary heads of an 8B shape are GBs
        heads = MedusaHeads.from_target(model, num_heads=4, num_layers=1, share_lm_head=False).to(dtype=dtype)
    medusa = Medusa(heads, target, "untrained")
    medusa.start(prompt, max_length, hidden=hidden)
    seq = prompt
    for n in trees:
        tree = Tree.from_choices(choices_from_accuracies(prior_accuracies(4), n, topk=8, depth=4))
        row[f"t_verify_tree{n}"] = timed(step(tree), repeats, device)
        flush(row)
        cfg = TreeConfig(choices=tuple(tree.paths[1:]))
        row[f"t_propose_tree{n}"] = timed(
            lambda cfg=cfg: medusa.propose(seq, 4, GREEDY, None, tree=cfg), repeats, device
        )
        flush(row)
    row["t_propose_chain4"] = timed(lambda: medusa.propose(seq, 4, GREEDY, None), repeats, device)
    # EAGLE-3 (untrained: same cost as trained), a 32k draft vocabulary as in the paper's recipes
    # (capped at the target's): one catch-up row per step plus `depth` draft forwards.
    aux = default_aux_layers(config.num_hidden_layers)
    with torch.device(device):
        e3 = Eagle3Model(
            Eagle3Config(
                vocab_size=config.vocab_size,
                draft_vocab_size=min(32000, config.vocab_size),
                hidden_layers=aux,
                **EagleConfig.layer_fields(config),
            )
        )
        e3.set_vocab(torch.arange(min(32000, config.vocab_size)))
    eagle = Eagle3(e3.to(device=device, dtype=dtype), target, "untrained")
    _, aux_hidden = target.forward_hidden(prompt[:, -2:], cache, logits_to_keep=1, hidden_layers=tuple(aux))
    cache.crop(base)

    def eagle_propose(cfg):
        def run():  # one new row to catch up, as after a step that accepted nothing
            eagle._rows, eagle._pending = context - 2, [aux_hidden[-1:]]
            eagle.propose(prompt, 4, GREEDY, None, tree=cfg)

        return run

    eagle.start(prompt, max_length, hidden=torch.zeros(context - 1, aux_hidden.shape[-1], device=device, dtype=dtype))
    eagle._catch_up(prompt)  # fill the draft's cache with the prefix once
    row["t_propose_eagle3_chain4"] = timed(eagle_propose(None), repeats, device)
    flush(row)
    for n in trees:
        cfg = TreeConfig(topk=8 if n > 16 else 4, depth=4 if n <= 16 else 6, num_draft_tokens=n + 1)
        row[f"t_propose_eagle3_tree{n}"] = timed(eagle_propose(cfg), repeats, device)
        flush(row)
    return row  # the models go with this frame; main() empties the CUDA cache between shapes


def row_line(row: dict, chains: list[int], trees: list[int]) -> str:
    """One measured row, every cost as a multiple of the plain decode step."""
    t1 = row["t_step"]
    cells = [f"chain{k} {row[f't_verify_chain{k}'] / t1:.2f}x" for k in chains]
    cells += [
        f"tree{n} {row[f't_verify_tree{n}'] / t1:.2f}x (+propose medusa {row[f't_propose_tree{n}'] / t1:.2f}x, "
        f"eagle3 {row[f't_propose_eagle3_tree{n}'] / t1:.2f}x)"
        for n in trees
    ]
    cells.append(f"eagle3 chain4 propose {row['t_propose_eagle3_chain4'] / t1:.2f}x")
    mode = "compiled" if row["compiled"] else "eager"
    return f"{row['shape']:<13} {row['dtype']:<9} {mode:<9} step {t1 * 1e3:7.2f} ms | verify/step: " + "  ".join(cells)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--shapes", default="tiny")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--chains", default="2,4")
    ap.add_argument("--trees", default="8,16,32,64")
    add_flags(
        ap,
        repeats=20,
        dtype={
            "default": "auto",
            "help": "one or several, comma-separated, measured side by side: float32,bfloat16,auto "
            "(auto: what `--dtype auto` picks on this machine, infer/hardware.py)",
        },
        out="runs/bench/verify_cost.json",
    )
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        use_affinity_threads()
    dtypes, reasons = [], {}
    for name in args.dtype.split(","):
        if name == "auto":
            name, why = auto_dtype(device)
            reasons["auto"] = f"{name}: {why}"
            print(f"--dtype auto -> {reasons['auto']}", flush=True)
        dtypes.append(getattr(torch, name))
    chains = [int(x) for x in args.chains.split(",")]
    trees = [int(x) for x in args.trees.split(",")]
    rows = []
    print(f"machine: {machine_line(device)}", flush=True)
    env = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "dtypes": [str(d) for d in dtypes],
        "auto": reasons,
        "cpu": cpu_info(),
        "torch": torch.__version__,
    }

    def flush(row):  # the rows so far plus the one being measured (partial until printed)
        save({"environment": env, "rows": [*rows, row]}, args.out, stamp=False, quiet=True)

    for shape in args.shapes.split(","):
        for compile, dtype in [(c, d) for c in ([False, True] if device.type == "cuda" else [False]) for d in dtypes]:
            row = measure(shape, compile, args.context, chains, trees, args.repeats, device, dtype, flush)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            rows.append(row)
            print(row_line(row, chains, trees), flush=True)
    save({"environment": env, "rows": rows}, args.out)
    return 0


if __name__ == "__main__":
    run_main(main)
