#!/usr/bin/env python
"""The few-row matmul candidates a CPU offers, side by side: what `--cpu-matmul` may choose from.

Verifying K+1 tokens pays only if it streams every weight once, as one decode row does. This
times, on weights of a real model's shapes (random values: the cost depends on shape and dtype
only; enough copies of each to exceed the caches, so every product reads its weight from memory
as a model's forward does), each candidate at 1 row and at the verify's row counts, and checks
its outputs against a float64 reference (an exact kernel differs from F.linear only by summation order):

    linear         torch's F.linear (x @ W.T; MKL's small-M path for a few rows in fp32)
    transposed     (W @ x.T).T through torch.mm: the weight as the left operand (infer/kernels.py)
    split          the weight as one block of rows per thread, one batched torch.bmm (infer/kernels.py)
    mkl-packed     torch.ops.mkl._mkl_linear on a weight prepacked by _mkl_reorder_linear_weight
                   for that row count (what inductor's freezing pass emits for fp32 on x86)
    onednn-packed  torch.ops.mkldnn._linear_pointwise on a weight reordered by oneDNN (packed for
                   one row, exactly as `--cpu-matmul onednn` runs it)
    compiled       torch.compile(mode="max-autotune") of F.linear: inductor's CPU GEMM templates
                   (--compile; tens of seconds of compilation per shape and row count)
    int8-weight    torchao's int8 weight-only quantisation (if torchao is installed): NOT exact,
                   a different model; listed for drafts, never for the target that verifies

    python scripts/bench_cpu_matmul.py --json results/cpu-matmul/candidates.json [--compile]

With --target (and --draft, a draft LM), the real models' step costs under each kernel that
`--cpu-matmul` offers, side by side in one process: a plain decode step, a verify of K+1
tokens and K drafted tokens (Engine.measure_step_costs), the draft in the target's dtype:

    python scripts/bench_cpu_matmul.py --target qwen2.5-coder-1.5b-instruct --draft qwen2.5-coder-0.5b-instruct \
        --json results/cpu-matmul/qwen-coder-steps.json

Prints a table (ms and x one row of F.linear) and writes JSON with the machine. Run it alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from draftsmith.evaluation.benchkit import add_flags, parser, run_main, save
from draftsmith.infer import kernels
from draftsmith.infer.hardware import cpu_info, format_cpu

# Qwen2.5-Coder-1.5B's projections (out x in): the MLP's dominate a step, attention's are smaller
SHAPES = {"mlp-up": (8960, 1536), "mlp-down": (1536, 8960), "attn-q": (1536, 1536)}


def _timed(fns, x, repeats: int) -> float:
    """Median seconds of one product, each repeat running every copy's callable once: the
    runtime's own timing (infer/kernels.py), over callables instead of weights."""
    return kernels._time(lambda x, fn, _: fn(x), x, fns, repeats)


def _one(w: torch.Tensor, rows: int, name: str, compile_: bool):
    """Candidate `name` on weight `w`: a callable on x [rows, in], or raises where unavailable.
    `linear`, `transposed`, `split` and `onednn` are the runtime's own kernels (`--cpu-matmul`)."""
    runtime = {"onednn-packed": "onednn"}.get(name, name)
    if runtime in kernels.KERNELS:
        kernel = kernels.KERNELS[runtime]
        if kernel.fn is None:
            return lambda x: F.linear(x, w)
        packed = kernel.pack(w) if kernel.pack else w
        return lambda x: kernel.fn(x, packed, None)
    if name == "mkl-packed":
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
        return lambda x: torch.ops.mkl._mkl_linear(x, packed, w, None, rows)
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    lin.weight.data = w.clone()
    if name == "compiled":
        import torch._inductor.config as inductor

        inductor.freezing = True
        return torch.compile(lin, mode="max-autotune", dynamic=False)
    from torchao.quantization import Int8WeightOnlyConfig, quantize_  # int8-weight: optional package

    model = torch.nn.Sequential(lin)
    quantize_(model, Int8WeightOnlyConfig())
    return model


def candidates(weights: list[torch.Tensor], rows: int, compile_: bool) -> dict:
    """name -> (one callable per weight copy, exact?) or a string saying why it is unavailable."""
    compiled = ["compiled"] if compile_ else []
    names = ["linear", "transposed", "split", "mkl-packed", "onednn-packed", *compiled, "int8-weight"]
    out = {}
    for name in names:
        ws = weights[:1] if name == "compiled" else weights  # one compiled graph: its weight stays cache-warm
        try:
            out[name] = ([_one(w, rows, name, compile_) for w in ws], name != "int8-weight")
        except Exception as e:  # noqa: BLE001 - an optional path: any failure means "not here"
            out[name] = f"unavailable: {type(e).__name__}: {str(e).splitlines()[0][:70] if str(e) else ''}"
    return out


def step_costs(target_name: str, draft_name: str, k: int, dtype: str) -> dict:
    """Per `--cpu-matmul` kernel: the real target's decode step, its verify of k+1 tokens and k
    drafted tokens of the draft LM, each in ms and as a fraction of linear's decode step."""
    from draftsmith.evaluation.prompts import load_prompts
    from draftsmith.infer.engine import Engine
    from draftsmith.infer.kernels import KERNELS, use_linear_kernel
    from draftsmith.models import Target, load_drafter

    target = Target.load(target_name, dtype=dtype)
    drafter = load_drafter(draft_name, target)
    prompt = load_prompts("humaneval", target.tokenizer, 1)[0]
    out = {}
    for name in KERNELS:
        use_linear_kernel(target.linear_modules(), name)
        use_linear_kernel(drafter.own_model(), name)
        c = Engine(target, drafter, k).measure_step_costs(prompt.ids, max_new_tokens=64)
        out[name] = {
            "t_step_ms": 1e3 * c["t_step"],
            "t_verify_ms": 1e3 * c["t_verify"],
            "t_draft_k_ms": 1e3 * c["t_draft_k"],
        }
    use_linear_kernel(target.linear_modules(), "linear")
    base = out["linear"]["t_step_ms"]
    print(f"{target_name} with {draft_name}, K={k}, {str(target.dtype)[6:]}, prompt of {len(prompt.ids)} tokens")
    print(f"{'kernel':<12}{'step ms':>9}{'verify ms':>11}{'x step':>8}{'draft/token ms':>16}{'x step':>8}")
    for name, c in out.items():
        c["verify_over_step"] = c["t_verify_ms"] / c["t_step_ms"]
        c["draft_token_over_step"] = c["t_draft_k_ms"] / k / c["t_step_ms"]
        c["step_over_linear_step"] = c["t_step_ms"] / base
        print(
            f"{name:<12}{c['t_step_ms']:>9.1f}{c['t_verify_ms']:>11.1f}{c['verify_over_step']:>7.2f}x"
            f"{c['t_draft_k_ms'] / k:>16.1f}{c['draft_token_over_step']:>7.2f}x"
        )
    return {"target": target_name, "draft": draft_name, "k": k, "prompt_tokens": len(prompt.ids), "kernels": out}


def time_candidates(shapes: str, rows_arg: str, dtype, repeats: int, compile_: bool) -> dict:
    """Every candidate on every shape and row count: its time, its error against float64, or
    why it is unavailable or failed."""
    torch.manual_seed(0)
    rows_list = [int(r) for r in rows_arg.split(",")]
    results = {}
    with torch.inference_mode():
        for name in shapes.split(","):
            shape = SHAPES.get(name) or tuple(int(v) for v in name.split("x"))
            w = torch.randn(shape, dtype=dtype) / shape[1] ** 0.5
            weights = kernels.stream_copies(w)
            base = kernels._time(None, torch.randn(1, shape[1], dtype=dtype), weights, repeats)  # F.linear
            for rows in rows_list:
                x = torch.randn(rows, shape[1], dtype=dtype)
                ref = (x.double() @ w.double().t()).float()
                lin_err = (F.linear(x, w).float() - ref).abs().max().item()
                for cand, entry in candidates(weights, rows, compile_).items():
                    key = f"{name} rows={rows} {cand}"
                    if isinstance(entry, str):
                        results[key] = {"shape": name, "rows": rows, "candidate": cand, "status": entry}
                        continue
                    fns, exact = entry
                    try:
                        err = (fns[0](x).float() - ref).abs().max().item()
                        t = _timed(fns, x, repeats)
                    except Exception as e:  # noqa: BLE001 - a candidate that fails here is reported, not fatal
                        results[key] = {"shape": name, "rows": rows, "candidate": cand, "status": f"failed: {e}"[:120]}
                        continue
                    # exact: the summation order may differ from F.linear's, nothing else
                    equal = "exact (summation order)" if err <= max(8 * lin_err, 1e-6) else f"max |diff| {err:.2e}"
                    results[key] = {
                        "shape": name,
                        "rows": rows,
                        "candidate": cand,
                        "status": "ok",
                        "ms": 1e3 * t,
                        "x_one_row_linear": t / base,
                        "max_abs_err_vs_float64": err,
                        "linear_max_abs_err_vs_float64": lin_err,
                        "outputs": equal if exact else f"not exact (quantised): {equal}",
                    }
    return results


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"of {list(SHAPES)}, or OUTxIN")
    ap.add_argument("--rows", default="1,5,16", help="row counts (K+1 for a chain verify)")
    add_flags(ap, dtype="float32", repeats=30)
    ap.add_argument("--compile", action="store_true", help="also inductor's max-autotune CPU GEMM (slow to build)")
    add_flags(
        ap,
        json=None,
        target={"default": None, "help": "a real target: its step costs under each --cpu-matmul kernel"},
        draft={"default": None, "help": "with --target: a draft LM sharing its tokenizer"},
        k=4,
    )
    args = ap.parse_args()
    if args.target:
        if not args.draft:
            ap.error("--target needs --draft (a draft LM sharing the target's tokenizer)")
        save(step_costs(args.target, args.draft, args.k, args.dtype), args.json)
        return
    results = time_candidates(args.shapes, args.rows, getattr(torch, args.dtype), args.repeats, args.compile)
    cpu = cpu_info()
    print(format_cpu(cpu), f"torch {torch.__version__}, {args.dtype}, {torch.get_num_threads()} threads")
    print(f"{'shape':<10}{'rows':>5}  {'candidate':<15}{'ms':>9}{'x 1 row':>9}  outputs")
    for r in results.values():
        if r["status"] != "ok":
            print(f"{r['shape']:<10}{r['rows']:>5}  {r['candidate']:<15}  {r['status']}")
            continue
        print(
            f"{r['shape']:<10}{r['rows']:>5}  {r['candidate']:<15}{r['ms']:>9.2f}"
            f"{r['x_one_row_linear']:>8.2f}x  {r['outputs']}"
        )
    save({"dtype": args.dtype, "threads": torch.get_num_threads(), "results": results}, args.json)


if __name__ == "__main__":
    run_main(main)
