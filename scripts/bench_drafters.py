#!/usr/bin/env python
"""Put several drafters and decoding shapes side by side on one target, in one run.

Each --method is NAME=DRAFT[,k=K][,choices=FILE][,topk=N][,depth=N][,tokens=N][,children=sampled]
where DRAFT is anything `--draft` takes (a checkpoint folder, truncated:N, prompt_lookup, a
model). Plain decoding and every method run on the same prompts, interleaved prompt by prompt
(draftsmith/bench.py: run_compare), so the ratios share the machine's noise. Prints a table, writes
results.json and a per-position acceptance plot.

    python scripts/bench_drafters.py --target smollm2-135m-instruct \\
        --method draft_lm_k4=runs/draft/final,k=4 \\
        --method medusa_k3=runs/medusa/final,k=3 \\
        --method medusa_tree8=runs/medusa/final,topk=2,depth=3,tokens=9 \\
        --num-prompts 8 --max-new-tokens 64 --out runs/bench/drafters
"""

import argparse
import os
import sys

from draftsmith.infer.engine import Engine
from draftsmith.infer.sampling import SamplingConfig
from draftsmith.infer.tree import TreeConfig, load_choices
from draftsmith.models import Target
from draftsmith.models.loading import cache_dir
from draftsmith.train.kinds import load_drafter

from draftsmith.bench import Method, check_output_path, format_compare, plot_acceptance, run_compare, write_json
from draftsmith.errors import DraftsmithError, run_command
from draftsmith.prompts import ContextFit, check_limit, load_prompt_sets

KEYS = {"k", "choices", "topk", "depth", "tokens", "children"}


def parse_method(text: str, drafters: dict, target) -> Method:
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise DraftsmithError(f"--method {text!r}: expected NAME=DRAFT[,k=K][,topk=N]...")
    draft, *opts = rest.split(",")
    kv = {}
    for o in opts:
        key, _, value = o.partition("=")
        if key not in KEYS or not value:
            raise DraftsmithError(f"--method {name}: unknown option {o!r} (known: {', '.join(sorted(KEYS))})")
        kv[key] = value
    if draft not in drafters:
        drafters[draft] = load_drafter(draft, target)
    tree = None
    if {"choices", "topk", "depth", "tokens"} & kv.keys():
        choices = tuple(load_choices(kv["choices"])) if "choices" in kv else None
        num = lambda key: int(kv[key]) if key in kv else None  # noqa: E731
        tree = TreeConfig(choices, num("topk"), num("depth"), num("tokens"), kv.get("children", "topk"))
    return Method(name, drafters[draft], int(kv.get("k", 4)), tree)


def head_accuracies(drafter) -> dict | None:
    """A Medusa checkpoint's measured per-head accuracy (top-1 and top-5), if it has one."""
    acc = getattr(getattr(getattr(drafter, "heads", None), "config", None), "head_accuracies", None)
    if not acc:
        return None
    return {f"head{k + 1}": {"top1": row[0], "top5": sum(row[:5])} for k, row in enumerate(acc)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2-135m-instruct")
    ap.add_argument(
        "--method", action="append", required=True, help="NAME=DRAFT[,k=K][,choices=FILE][,topk=N][,depth=N][,tokens=N]"
    )
    ap.add_argument(
        "--prompts",
        default="chat",
        help="prompt set(s), comma-separated: chat, code, mt-bench, humaneval or jsonl files",
    )
    ap.add_argument(
        "--num-prompts",
        type=int,
        default=8,
        help="per prompt set (mt-bench: questions, both turns each, over its 8 categories)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench/drafters")
    args = ap.parse_args()
    check_limit(args.num_prompts)
    check_output_path(os.path.join(args.out, "results.json"), "--out")  # before the run, not after it
    import torch

    dtype = args.dtype or ("bfloat16" if torch.cuda.is_available() and args.device != "cpu" else "float32")
    target = Target.load(args.target, dtype=dtype, device=args.device)
    drafters: dict = {}
    methods = [parse_method(m, drafters, target) for m in args.method]
    # Several sets ("chat,code", "mt-bench,humaneval"): each contributes --num-prompts prompts (MT-Bench:
    # questions), reported per category, per set and per MT-Bench turn too.
    draft_tokens = max(Engine(target, m.drafter, m.k, tree=m.tree).max_draft_tokens for m in methods)
    fit = ContextFit(
        getattr(target.config, "max_position_embeddings", None),
        args.max_new_tokens,
        draft_tokens,
        model=args.target,
        truncate_flag=None,
    )
    prompts = load_prompt_sets(
        args.prompts,
        target.tokenizer,
        args.num_prompts,
        target=target,
        max_new_tokens=args.max_new_tokens,
        cache_dir=cache_dir(),
        progress=True,
        fit=fit,
    )
    result = run_compare(
        target, methods, prompts, args.max_new_tokens, SamplingConfig(temperature=args.temperature), args.seed
    )
    result["prompts"] = args.prompts
    result["command"] = " ".join(sys.argv)
    result["head_accuracies"] = {d: h for d, dr in drafters.items() if (h := head_accuracies(dr))}
    print(format_compare(result))
    for draft, heads in result["head_accuracies"].items():
        print(f"{draft}: " + "  ".join(f"{h} top1 {a['top1']:.2f} top5 {a['top5']:.2f}" for h, a in heads.items()))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.json")
    write_json(result, path)
    spec = {n: r for n, r in result["methods"].items() if n != "plain"}
    plot_acceptance(spec, os.path.join(args.out, "per_position_acceptance.png"))
    print(f"wrote {path} and per_position_acceptance.png")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
