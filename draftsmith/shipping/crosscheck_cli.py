"""`draftsmith crosscheck`'s command line: its options and `run` (draftsmith/shipping/crosscheck.py
decodes and compares; draftsmith/shipping/sampled.py takes --temperature > 0).

vLLM's own settings pass through to both of its engines: which vLLM (--vllm, or DRAFTSMITH_VLLM),
--tensor-parallel-size, --pipeline-parallel-size, --gpu-memory-utilization (with --device cuda its
default is the share free beside our copy of the target, halved between the two engines:
crosscheck.engine_share) and any further engine argument (--vllm-arg KEY=VALUE).
"""

from __future__ import annotations

import json

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.crosscheck import ENGINE_KINDS, crosscheck, format_crosscheck


def add_arguments(parser) -> None:
    parser.add_argument("checkpoint", help="a checkpoint folder written by `draftsmith train` (e.g. runs/NAME/final)")
    parser.add_argument(
        "--engines",
        default="vllm",
        help="comma list: "
        + ", ".join(f"{e} ({', '.join(kinds)})" for e, kinds in ENGINE_KINDS.items())
        + "; install them with `bash scripts/install_engines.sh`",
    )
    parser.add_argument("--prompts", default="chat,code", help="prompt sets, as for bench (default chat,code)")
    parser.add_argument("--num-prompts", type=int, default=None, help="the first N prompts of each set")
    parser.add_argument(
        "--num-speculative-tokens",
        "-k",
        type=int,
        default=None,
        help="chain length K (default: the kind's default K, as generate and eval draft)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="our runtime's dtype: float32 (default) is the agreement contract; bfloat16 runs race, "
        "and their greedy outputs may part at near-ties",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where our runtime decodes: cpu (default), cuda or cuda:N; the report and the record say "
        "which device, its name and the dtype",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        help="0 (default): greedy, the exact contract; > 0: sampled, the engine's per-position acceptance "
        "against ours under the engine's own rule, as statistics (vllm only)",
    )
    parser.add_argument("--top-k", type=int, default=0, help="with --temperature: top-k (0: off)")
    parser.add_argument("--top-p", type=float, default=1.0, help="with --temperature: top-p (1: off)")
    parser.add_argument(
        "--min-drafted",
        type=int,
        default=1000,
        help="with --temperature: drafted tokens a side, at least (default 1000)",
    )
    parser.add_argument(
        "--cpu-matmul",
        # infer/kernels.py CHOICES (kept out of the import)
        choices=["auto", "linear", "transposed", "split", "onednn"],
        default="linear",
        help="CPU: our runtime's few-row matmul, as bench's --cpu-matmul; linear (default): torch's F.linear; "
        "auto: the kernel bench chooses on this machine, so that our side times what bench times (recorded)",
    )
    parser.add_argument("--workdir", default=None, help="exports and engine logs (default: beside the checkpoint)")
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=None,
        help="vLLM: each engine's share of the GPU (default with --device cuda: the share free beside our copy "
        "of the target, halved between the two engines)",
    )
    from draftsmith.evaluation.switches import TEMPLATE_FLAG, TEMPLATE_HELP

    parser.add_argument(TEMPLATE_FLAG, dest="chat_template_kwargs", default=None, help=TEMPLATE_HELP)
    parser.add_argument("--json", default=None, help="write the result as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    from draftsmith.shipping.engines.vllm_engine import add_parallel_arguments, add_vllm_argument

    add_vllm_argument(parser)
    add_parallel_arguments(parser)
    parser.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any further vLLM engine argument for both engines (repeatable, JSON values), e.g. enforce_eager=true",
    )


def vllm_engine_args(items) -> dict:
    """--vllm-arg KEY=VALUE items -> vLLM's LLM(...) keyword arguments (JSON values, else strings)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DraftsmithError(f"--vllm-arg {item!r}: expected KEY=VALUE, e.g. enforce_eager=true")
        try:
            out[key.strip().replace("-", "_")] = json.loads(value)
        except ValueError:
            out[key.strip().replace("-", "_")] = value  # a plain string: mp, ray, auto
    return out


def run(args) -> int:
    from draftsmith.evaluation.bench import check_output_path

    if args.num_speculative_tokens is not None and args.num_speculative_tokens < 1:
        raise DraftsmithError("--num-speculative-tokens must be >= 1")
    if args.max_new_tokens < 1:
        raise DraftsmithError("--max-new-tokens must be >= 1")
    if args.num_prompts is not None and args.num_prompts < 1:
        raise DraftsmithError("--num-prompts must be >= 1")
    if args.json:
        check_output_path(args.json, "--json", (".json",))
    from draftsmith.models.target import check_device

    check_device(args.device)  # before any export or engine starts
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    vllm_only = (args.tensor_parallel_size, args.pipeline_parallel_size, args.vllm_arg, args.vllm)
    if any(vllm_only) and "vllm" not in engines:
        raise DraftsmithError(
            "--tensor-parallel-size, --pipeline-parallel-size, --vllm-arg and --vllm are vLLM's: add vllm to --engines"
        )
    result = crosscheck(
        args.checkpoint,
        engines,
        args.prompts,
        args.num_speculative_tokens,
        args.max_new_tokens,
        args.num_prompts,
        args.workdir,
        args.dtype,
        not args.quiet,
        {
            "tensor_parallel_size": args.tensor_parallel_size,
            "pipeline_parallel_size": args.pipeline_parallel_size,
            "gpu_memory_utilization": args.gpu_memory_utilization,
            "engine_args": vllm_engine_args(args.vllm_arg),
        },
        args.device,
        args.chat_template_kwargs,
        args.vllm,
        args.cpu_matmul,
    )
    print(format_crosscheck(result))
    if args.json:  # stamped (machine, date, commit, command) like every other report
        from draftsmith.evaluation.report import write_report

        write_report(result, args.json)
        print(f"wrote {args.json}")
    disagree = [n for n, r in result["runtimes"].items() if r.get("agreement") and not r["agreement"]["agrees"]]
    return 1 if disagree else 0
