#!/usr/bin/env python
"""The engine's own speed, end to end: tokens/s of plain and speculative decoding, eager and
compiled (static cache + CUDA graphs, CUDA only), on randomly initialised Llamas of real shapes
(SHAPES in bench_verify_cost.py; nothing downloaded) with drafts forced to agree.

Random weights make real drafts useless, so acceptance is forced to 1 and what is left is the
engine's cost. With per-token acceptance α = 1 a chain of k tokens emits E = (1-α^(k+1))/(1-α)
= k+1 tokens per target forward, and the speedup is (k+1)·t_step / (k·t_draft + t_verify)
(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", Thm 3.8 and
Eq. 1 with α → 1). Two drafts:

- oracle: replays the target's own greedy continuation, so t_draft ≈ 0 and
  the speedup is the ceiling (k+1)·t_step / t_verify; t_verify/t_step is what
  bench_verify_cost.py measures. As a tree (topk 2, depth k) only the rank-0 path is right:
  τ = k+1 still, with 2+4+..+2^k nodes verified per step.
- self: the target itself as an independent draft_lm (its own KV cache, k eager forwards per
  step): τ = k+1 too, but t_draft = t_step, so about 1x: the draft_lm path at its worst case.

The oracle's continuation is the speculative engine's own output, settled as a fixed point
(decode with the oracle, replay what came out, until the output is what it replays): random
weights give near-tied logits everywhere, and in bf16 on a GPU a batched verify or a wider KV
cache rounds differently from one-token steps, so a plain run's continuation was rejected at
almost every step (τ 1.09 of 6 on an H200). `settled` says whether the fixed point was reached.
Each row checks its output against a plain run of the same length (`same`; in bf16 it can be
False for the reason above). Prints a table, writes JSON.

    python scripts/bench_engine.py --shapes smollm2-135m,llama-1b --out runs/gpu/engine.json
    python scripts/bench_engine.py --shapes tiny --device cpu   # seconds
"""

from __future__ import annotations

import pathlib
import statistics
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_verify_cost import SHAPES, random_model  # noqa: E402

from draftsmith.errors import DraftsmithError  # noqa: E402
from draftsmith.evaluation.benchkit import add_flags, parser, run_main, save  # noqa: E402
from draftsmith.evaluation.graph_health import counting  # noqa: E402
from draftsmith.infer import Engine  # noqa: E402
from draftsmith.infer.proposal import Drafter, Proposal  # noqa: E402
from draftsmith.infer.tree import Tree, TreeConfig, full_choices  # noqa: E402
from draftsmith.models import DraftLM, Target  # noqa: E402

METHODS = ("oracle", "self", "tree")  # besides plain, always measured


class Oracle(Drafter):
    """A drafter that proposes the target's known greedy continuation `full` (prompt + tokens)."""

    kind = "oracle"
    supports_trees = True

    def __init__(self, full: torch.Tensor, vocab_size: int):
        self.full, self.vocab = full, vocab_size
        self._trees = {}

    def start(self, prompt, max_length, hidden=None):
        pass

    def accept(self, num_accepted, hidden=None):
        pass

    def propose(self, seq, k, sampling, generator=None, tree=None):
        n = seq.shape[1]
        if tree is None:
            return Proposal(self.full[n : n + k])
        if tree not in self._trees:  # node i: the right token at its depth if its ranks are all 0
            t = Tree.from_choices(full_choices(tree.topk, tree.depth))
            depth = torch.tensor([len(p) - 1 for p in t.paths[1:]], device=self.full.device)
            wrong = torch.tensor([0 if not any(p) else 1 + sum(p) for p in t.paths[1:]], device=self.full.device)
            self._trees[tree] = (t, depth, wrong)
        t, depth, wrong = self._trees[tree]
        return Proposal((self.full[n + depth] + wrong) % self.vocab, tree=t)


def settle(target, prompt, ref, k, max_new, tree, tries: int = 6):
    """(an Oracle, whether it is a fixed point): the oracle replays `ref`; the engine decoding
    with it may emit other tokens where rounding parts a batched verify from one-token steps, so
    replay what it emitted until nothing changes. Settled k+1 tokens past `max_new`, so the timed
    runs' last step also drafts the target's own tokens; padded past that so every draft is full."""
    device, pad = target.device, [0] * (2 * k + 2)
    for _ in range(tries):
        oracle = Oracle(torch.tensor(prompt + ref + pad, device=device), target.vocab_size)
        out = Engine(target, oracle, k, tree=tree).generate(prompt, max_new + k + 1, eos_token_ids=()).tokens
        if out == ref:
            return oracle, True
        ref = out
    return Oracle(torch.tensor(prompt + ref + pad, device=device), target.vocab_size), False


def run(engine, prompt, n, repeats, speculative=True):
    """The last result, the median tokens/s of the timed runs (the first one warms up / compiles,
    untimed) and the graph counters over the timed runs: after warm-up they should all be 0."""
    results = [engine.generate(prompt, n, eos_token_ids=(), speculative=speculative)]
    with counting() as graphs:
        results += [engine.generate(prompt, n, eos_token_ids=(), speculative=speculative) for _ in range(repeats)]
    return results[-1], statistics.median(r.tokens_per_s for r in results[1:]), graphs


def measure(shape, device, dtype, k, max_new, prompt_len, repeats, tree, methods=METHODS, flush=None):
    """The rows of one shape; `flush(rows)` after each, so a run stopped by a time limit keeps them."""
    model = random_model(shape, device, dtype)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, model.config.vocab_size, (prompt_len,), generator=gen).tolist()
    rows, eager_plain = [], None
    for compiled in [False, True] if device.type == "cuda" else [False]:
        target = Target(model, None, f"random {shape}", compile=compiled)
        mode = "compiled" if compiled else "eager"
        result, plain_tps, plain_graphs = run(Engine(target), prompt, max_new, repeats)
        ref = result.tokens
        oracle, settled = settle(target, prompt, ref, k, max_new, None)
        tree_oracle, tree_settled = (
            settle(target, prompt, ref, k, max_new, TreeConfig(topk=2, depth=k)) if tree else (None, False)
        )
        eager_plain = eager_plain or plain_tps
        todo = [("plain", None, None, True)]
        if "oracle" in methods:
            todo.append((f"oracle chain{k}", oracle, None, settled))
        if "self" in methods:
            todo.append((f"self chain{k}", DraftLM(model, target, "self"), None, True))
        if tree and "tree" in methods:
            name = f"oracle tree{sum(2**d for d in range(1, k + 1))}"
            todo.append((name, tree_oracle, TreeConfig(topk=2, depth=k), tree_settled))
        for method, drafter, shape_, is_settled in todo:
            if drafter is not None:
                result, tps, graphs = run(Engine(target, drafter, k, tree=shape_), prompt, max_new, repeats)
            else:
                tps, graphs = plain_tps, plain_graphs
            row = {
                "shape": shape,
                "mode": mode,
                "method": method,
                "k": k if drafter else 0,
                "tokens_per_s": tps,
                "speedup": tps / plain_tps,
                "speedup_vs_eager_plain": tps / eager_plain,
                "mean_acceptance_length": result.metrics.mean_acceptance_length,
                "same_as_plain": result.tokens == ref,
                "settled": is_settled,
                "new_tokens": len(result.tokens),
                "target_forwards": result.target_forwards,
                "graphs_after_warmup": graphs,  # recompiles, breaks, CUDA-graph skips in the timed runs
            }
            rows.append(row)
            if flush:
                flush(rows)
            print(
                f"{shape:<13} {mode:<9} {method:<16} {tps:9.1f} tok/s  {row['speedup']:5.2f}x  "
                f"(vs eager plain {row['speedup_vs_eager_plain']:5.2f}x)  tau {row['mean_acceptance_length']:.2f}  "
                f"same {row['same_as_plain']}  settled {is_settled}",
                flush=True,
            )
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--shapes", default="tiny", help=f"comma-separated, of: {', '.join(SHAPES)}")
    add_flags(
        ap,
        device={"default": None, "help": "default: cuda if available, else cpu"},
        dtype={"default": None, "help": "default: bfloat16 on CUDA, float32 on CPU"},
        k={"default": 4, "help": "drafted tokens per step (a tree: its depth)"},
        max_new_tokens=128,
    )
    ap.add_argument("--prompt-len", type=int, default=128)
    add_flags(ap, repeats={"default": 3, "help": "timed runs per row after one warm-up (median)"})
    ap.add_argument("--no-tree", action="store_true", help="skip the oracle tree row")
    ap.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, besides plain: {', '.join(METHODS)} (self costs a second target per step)",
    )
    add_flags(ap, out="runs/bench/engine.json")
    args = ap.parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DraftsmithError("--device cuda: torch sees no CUDA device")
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise DraftsmithError(f"unknown shape(s) {', '.join(unknown)}: choose from {', '.join(SHAPES)}")
    env = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(dtype),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
    }
    methods = [m for m in args.methods.split(",") if m]
    if set(methods) - set(METHODS):
        raise DraftsmithError(f"--methods: unknown {', '.join(set(methods) - set(METHODS))}; of {', '.join(METHODS)}")
    rows = []

    def flush(shape_rows):  # after every row: a run stopped by a time limit keeps what it measured
        result = {
            "command": " ".join(sys.argv),
            "environment": env,
            "prompt_len": args.prompt_len,
            "max_new_tokens": args.max_new_tokens,
            "rows": rows + shape_rows,
        }
        save(result, args.out, quiet=True)

    for shape in shapes:
        rows += measure(
            shape,
            device,
            dtype,
            args.k,
            args.max_new_tokens,
            args.prompt_len,
            args.repeats,
            not args.no_tree,
            methods,
            flush,
        )
        flush([])
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    run_main(main)
