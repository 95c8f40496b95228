#!/usr/bin/env python
"""The real pair on a CPU: Qwen2.5-Coder-0.5B-Instruct drafting for Qwen2.5-Coder-1.5B-Instruct
(same tokenizer), untrained and distilled by our trainer, against plain decoding and against
transformers' assisted generation with the same drafts, in one run. One command:

    bash scripts/install_qwen.sh
    python scripts/bench_qwen_coder.py --out results/qwen-coder

Stages (a rerun skips a finished stage: the distilled draft is reused from --draft-run):

1. distill: `draftsmith train configs/qwen2.5-coder-1.5b-instruct/draft_lm.yaml` (LoRA, KD on
   Python code) for --train-minutes into --draft-run, unless a checkpoint is there.
2. costs: what one target step, one verify of K+1 tokens and one drafted token cost on the real
   models, before (torch's F.linear everywhere, the draft in the target's dtype) and after the
   choice `--cpu-matmul auto --draft-dtype auto` makes on this machine (infer/kernels.py).
3. bench: plain decoding, ours and transformers' assisted generation (constant K, no confidence
   cut-off) with each draft (as the library ships, and once with our kernels: the loop alone),
   interleaved prompt by prompt on HumanEval problems and MT-Bench's coding and math questions
   (first turns), greedy: every output is checked equal to plain's.
   Speedups are Spec-Bench's (mean per-prompt tokens/s over plain's); τ counts the bonus token.
4. report: OUT/results.json (machine, choices and why, step costs, predicted vs measured) and
   OUT/qwen_coder.png; the table is printed.

The machine decides every ratio (verify cost above all): run it alone on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from draftsmith.evaluation.benchkit import add_flags, comparison, parser, run_main, save

RECIPE = "configs/qwen2.5-coder-1.5b-instruct/draft_lm.yaml"
TARGET, DRAFT = "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"
TRAIN_OVERRIDES = [  # what fits a 2-core CPU: 1 row x 256 tokens, 4 accumulated (~65 s per step)
    "--data.max_length=256",
    "--data.eval_rows=8",
    "--optim.batch_size=1",
    "--optim.grad_accum=4",
    "--optim.warmup_steps=5",
    "--checkpoint.save_every=10",
    "--logging.log_every=2",
    "--logging.eval_every=0",
    "--logging.eval_batches=2",
    "--logging.acceptance_prompts=2",
]


def distill(recipe: str, target: str, run: Path, minutes: float) -> Path:
    from draftsmith.models import resolve_checkpoint

    if not (run / "final").is_dir():
        cmd = [sys.executable, "-m", "draftsmith.train", recipe, "--output-dir", str(run), *TRAIN_OVERRIDES]
        cmd.append(f"--model.target={target}")
        cmd.append(f"--optim.max_minutes={minutes}")
        print("distilling:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    return resolve_checkpoint(str(run), "--draft-run")


def prompts(tokenizer, humaneval: int, per_category: int):
    from draftsmith.evaluation.prompts import Prompt, load_prompts, read_rows, render_chat

    out = load_prompts("humaneval", tokenizer, humaneval)
    for category in ("coding", "math"):
        rows = [r for r in read_rows("mt-bench") if r["category"] == category][:per_category]
        for r in rows:
            text, ids = render_chat(tokenizer, [{"role": "user", "content": r["turns"][0]}], "mt-bench")
            out.append(Prompt(ids, text, category, 1, f"mt-bench/{r['question_id']}", "mt-bench"))
    return out


def step_costs(target, drafter, k: int, prompt, max_new_tokens: int, kernel: str, draft_dtype: str) -> dict:
    from draftsmith.infer.engine import Engine

    choice = target.use_cpu_matmul(kernel, k + 1, drafter, draft_dtype)
    costs = Engine(target, drafter, k).measure_step_costs(prompt.ids, max_new_tokens=max_new_tokens)
    return {
        "choice": choice,
        "t_step_ms": 1e3 * costs["t_step"],
        "t_verify_ms": 1e3 * costs["t_verify"],
        "verify_over_step": costs["t_verify"] / costs["t_step"],
        "t_draft_k_ms": 1e3 * costs["t_draft_k"],
        "draft_token_over_step": costs["t_draft_k"] / k / costs["t_step"],
    }


def bench(target, drafts: dict, library_drafts: dict, prompts_, k: int, max_new_tokens: int) -> dict:
    """Every method on every prompt, interleaved. transformers' assisted generation runs twice per
    draft: as the library ships (F.linear, the draft in the target's dtype: `library_drafts`, fresh
    copies) and with the kernels and draft dtype our runtime chose (the same `drafts`), which
    isolates the decoding loop."""
    from draftsmith.evaluation.bench import (
        _hf_generate,
        _in_loop_prediction,
        breakdown,
        configure_hf_assistant,
        in_loop_times,
        interleaved,
    )
    from draftsmith.infer.engine import Engine, GenerationResult, predicted_speedup
    from draftsmith.infer.kernels import output_head, route_as_chosen, use_linear_kernel
    from draftsmith.infer.metrics import SpecMetrics
    from draftsmith.infer.sampling import GREEDY

    eos, pad = target.eos_token_ids, target.tokenizer.pad_token_id
    pad = pad if pad is not None else min(eos)
    chosen = target.cpu_matmul["target"]
    engines = {"plain": Engine(target)}
    runs = {}
    for label, d in drafts.items():
        engines[f"ours ({label})"] = Engine(target, d, k)
    for name, e in engines.items():
        runs[name] = (lambda e, s: lambda p, seed: e.generate(p.ids, max_new_tokens, GREEDY, seed=seed, speculative=s))(
            e, name != "plain"
        )

    def ours_kernels():
        route_as_chosen(target.model, chosen, output_head(target.model))

    def hf(assistant, our_kernels: bool):
        configure_hf_assistant(assistant, k)

        def run(p, seed):
            ours_kernels() if our_kernels else use_linear_kernel(target.model, "linear")
            try:
                toks, secs = _hf_generate(target.model, p.ids, max_new_tokens, GREEDY, eos, pad, seed, assistant)
            finally:
                ours_kernels()
            return GenerationResult(toks, [], "", SpecMetrics(), secs, 0, len(p.ids))

        return run

    for label, d in library_drafts.items():
        runs[f"transformers assisted ({label})"] = hf(d.as_assistant_model(), False)
    for label, d in drafts.items():
        if label == "untrained":  # the loop alone: same kernels and draft dtype as ours
            runs[f"transformers assisted, our kernels ({label})"] = hf(d.as_assistant_model(), True)
    names = list(runs)
    for n in names:  # warm-up: allocator, kernels, lazy init; not recorded
        runs[n](prompts_[0], 0)
    outputs = interleaved(lambda n, p, i: runs[n](p, i), names, prompts_, "bench")
    summary = comparison(outputs)
    tps = {n: summary[n]["tokens_per_s"] for n in names}
    loop = {n: in_loop_times(outs) for n, outs in outputs.items()}
    rows = {}
    for n in names:
        m = summary[n]["metrics"]
        row = {
            "tokens_per_s": tps[n],
            "speedup": tps[n] / tps["plain"],
            "outputs_match_plain": summary[n]["outputs_match"],
            **breakdown(prompts_, outputs[n], outputs["plain"]),
        }
        if n in engines and n != "plain":
            e = engines[n]
            costs = e.measure_step_costs(
                prompts_[0].ids, per_position_acceptance=m.per_position_acceptance, max_new_tokens=max_new_tokens
            )
            tau = m.mean_acceptance_length
            row.update(m.as_dict(), step_costs_s=costs)
            row["predicted_speedup"] = predicted_speedup(tau, costs["t_step"], costs["t_draft_k"], costs["t_verify"])
            row.update(_in_loop_prediction(tau, loop["plain"], loop[n]))
            label = n[len("ours (") : -1]
            row["speedup_vs_transformers_assisted"] = tps[n] / tps[f"transformers assisted ({label})"]
            row["measured_over_predicted"] = row["speedup"] / row["predicted_speedup"]
            if "speedup_decode" in row:  # the decode phase alone: what the speed model describes
                row["decode_measured_over_predicted"] = row["speedup_decode"] / row["predicted_speedup"]
        rows[n] = row
    return rows


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = {n: r for n, r in result["methods"].items() if n != "plain"}
    sets = list(next(iter(methods.values()))["by_domain"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / len(methods)
    for j, (n, r) in enumerate(methods.items()):
        xs = [i + j * width for i in range(len(sets) + 1)]
        a.bar(xs, [r["by_domain"][s]["speedup"] for s in sets] + [r["speedup"]], width, label=n)
    a.axhline(1.0, color="k", lw=0.8)
    a.set_xticks([i + 0.4 - width / 2 for i in range(len(sets) + 1)], [*sets, "all"])
    a.set_ylabel("speedup over plain decoding")
    a.legend(fontsize=7)
    for n, r in methods.items():
        if r.get("per_position_acceptance"):
            pos = r["per_position_acceptance"]
            b.plot(range(1, len(pos) + 1), pos, marker="o", label=f"{n}: τ {r['mean_acceptance_length']:.2f}")
    b.set_xlabel("draft position")
    b.set_ylabel("acceptance rate")
    b.set_ylim(0, 1)
    b.legend(fontsize=7)
    fig.suptitle(
        f"{result['target']} with {result['draft']} drafts, K={result['k']}, greedy\n{result['machine_summary']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def print_summary(result: dict) -> None:
    """The machine, the step costs before and after the kernel choice, then one line per method."""
    from draftsmith.evaluation.bench import time_split_line

    k, methods = result["k"], result["methods"]
    print(result["machine_summary"])
    for label in ("before", "after"):
        c = result["step_costs"][label]
        print(
            f"{label:>7}: step {c['t_step_ms']:.0f} ms, verify {k + 1} tokens "
            f"{c['verify_over_step']:.2f}x a step, a drafted token {c['draft_token_over_step']:.2f}x a step"
        )
    print(f"{'method':<34}{'tok/s':>7}{'speedup':>9}{'tau':>6}{'pred':>7}{'vs hf':>7}  equal")
    for n, r in methods.items():
        tau, pred = r.get("mean_acceptance_length"), r.get("predicted_speedup")
        vs = r.get("speedup_vs_transformers_assisted")
        print(
            f"{n:<34}{r['tokens_per_s']:>7.2f}{r['speedup']:>8.2f}x"
            f"{(f'{tau:.2f}' if tau else '-'):>6}{(f'{pred:.2f}x' if pred else '-'):>7}"
            f"{(f'{vs:.2f}x' if vs else '-'):>7}  {r['outputs_match_plain']}"
        )
    for n, r in methods.items():
        if r.get("time_split_s"):
            print(f"{n}: {time_split_line(r)}")


def main() -> None:
    ap = parser(
        __doc__,
        out="results/qwen-coder",
        target=TARGET,
        draft={"default": DRAFT, "help": "the untrained draft (a model sharing the target's tokenizer)"},
    )
    ap.add_argument("--recipe", default=RECIPE, help="the distillation recipe (its drafter.init is the draft)")
    ap.add_argument("--draft-run", default="runs/qwen-coder-draft-lm", help="the distilled draft's run folder")
    ap.add_argument("--train-minutes", type=float, default=25.0)
    ap.add_argument("--humaneval", type=int, default=6, help="HumanEval problems")
    ap.add_argument("--per-category", type=int, default=2, help="MT-Bench coding and math questions each")
    add_flags(ap, k=4, max_new_tokens=64, dtype="auto")
    ap.add_argument("--cpu-matmul", default="auto")
    ap.add_argument("--draft-dtype", default="auto")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from draftsmith.evaluation.bench import format_cpu
    from draftsmith.infer.hardware import cpu_info
    from draftsmith.models import Target, load_drafter

    out = Path(args.out)
    distilled_path = distill(args.recipe, args.target, Path(args.draft_run), args.train_minutes)
    target = Target.load(args.target, dtype=args.dtype)
    untrained = load_drafter(args.draft, target)
    ps = prompts(target.tokenizer, args.humaneval, args.per_category)
    # before: the draft still in the target's dtype, so this comes first
    before = step_costs(target, untrained, args.k, ps[0], args.max_new_tokens, "linear", str(target.dtype)[6:])
    after = step_costs(target, untrained, args.k, ps[0], args.max_new_tokens, args.cpu_matmul, args.draft_dtype)
    distilled = load_drafter(str(distilled_path), target)
    after_distilled = target.use_cpu_matmul(args.cpu_matmul, args.k + 1, distilled, args.draft_dtype)
    library = {"untrained": load_drafter(args.draft, target), "distilled": load_drafter(str(distilled_path), target)}
    methods = bench(target, {"untrained": untrained, "distilled": distilled}, library, ps, args.k, args.max_new_tokens)
    cpu = cpu_info()
    result = {
        "target": args.target,
        "draft": args.draft,
        "distilled_checkpoint": str(distilled_path),
        "dtype": str(target.dtype)[6:],
        "dtype_reason": target.dtype_reason,
        "k": args.k,
        "max_new_tokens": args.max_new_tokens,
        "num_prompts": len(ps),
        "prompts": [p.qid for p in ps],
        "machine_summary": format_cpu(cpu),
        "step_costs": {"before": before, "after": after, "distilled_choice": after_distilled},
        "methods": methods,
    }
    out.mkdir(parents=True, exist_ok=True)
    save(result, out / "results.json", quiet=True)
    plot(result, out / "qwen_coder.png")
    print_summary(result)
    print(f"wrote {out / 'results.json'} and {out / 'qwen_coder.png'}")


if __name__ == "__main__":
    run_main(main)
