"""The decoding commands, `draftsmith bench`, `eval` and `generate`: the options each declares
(`bench_arguments`, `eval_arguments`, `generate_arguments`) and what each runs (`cmd_bench`,
`cmd_eval`, `cmd_generate`), as draftsmith/cli.py's table of commands names them.

Nothing heavy at import: the parser is built without torch, and the runtime, the models and the
prompt sets load when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys

from draftsmith.errors import DraftsmithError

DEFAULT_TARGET = "smollm2-135m-instruct"


def _common(p: argparse.ArgumentParser, draft_required: bool = True) -> None:
    p.add_argument(
        "--target",
        default=None,
        help="built-in name, local folder, .gguf file or Hub id (default: a checkpoint's own target, else "
        f"{DEFAULT_TARGET})",
    )
    p.add_argument(
        "--draft",
        required=draft_required,
        help="truncated:N | prompt_lookup[:N] | a causal LM sharing the target's tokenizer (built-in, folder, .gguf, "
        "Hub id)",
    )
    p.add_argument(
        "--num-speculative-tokens",
        "-k",
        type=int,
        default=None,
        help="tokens drafted per step (K): chain depth (medusa: heads used); default: the drafter kind's default K "
        "(default_k, 4 for the built-in kinds), or all a capped drafter drafts (a medusa's heads) if fewer; "
        "with --adaptive-k the most it drafts (with tree flags too: the longest chain it may choose instead of "
        "the tree)",
    )
    tree = p.add_argument_group(
        "trees (medusa, eagle): opt in with choices or any of topk/depth/num-draft-tokens (named as SGLang's)"
    )
    tree.add_argument("--tree-choices", default=None, help="JSON file of Medusa-style paths, e.g. [[0], [1], [0, 0]]")
    tree.add_argument("--tree-topk", type=int, default=None, help="children per node (SGLang: speculative_eagle_topk)")
    tree.add_argument("--tree-depth", type=int, default=None, help="tree depth (SGLang: speculative_num_steps)")
    tree.add_argument(
        "--tree-num-draft-tokens",
        type=int,
        default=None,
        help="tokens verified per step, root included (SGLang: speculative_num_draft_tokens)",
    )
    tree.add_argument(
        "--tree-children",
        choices=["topk", "sampled"],
        default="topk",
        help="children: the drafter's top ranks, or sampled without replacement (temperature > 0)",
    )
    p.add_argument(
        "--verification",
        choices=["lossless", "typical-lossy"],
        default="lossless",
        help="lossless (default): greedy / speculative sampling; typical-lossy: Medusa's typical acceptance, changes "
        "the output distribution",
    )
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--dtype",
        choices=["auto", "float32", "bfloat16", "float16"],
        default="auto",
        help="auto (default): bfloat16 on CUDA and on CPUs with AMX/AVX512-BF16 where it measured faster, "
        "else float32 (the choice and why are in every report)",
    )
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument(
        "--device-map",
        choices=["auto", "balanced"],  # models/placement.py MODES (kept out of the import)
        default=None,
        help="spread the target's layers over the visible GPUs (auto: fewest that hold it; balanced: all evenly); "
        "auto is used when --device cuda does not hold the weights. Layers run one GPU at a time: not "
        "tensor-parallel speed (serve-bench --tensor-parallel-size measures that)",
    )
    p.add_argument(
        "--compile",
        choices=["auto", "on", "off"],
        default="auto",
        help="torch.compile (CUDA graphs) the target's decode/verify forwards and every drafter's "
        "drafting forwards (fixed shapes; prefill stays eager); auto (default): on CUDA only",
    )
    p.add_argument(
        "--target-forward",
        choices=["auto", "fused", "transformers"],  # models/target.py Target.FORWARDS
        default="auto",
        help="the target's eager forward: fused (one q/k/v and one gate/up projection per layer, attention over "
        "the valid prefix: fewer, larger operator calls; Llama, Mistral, Qwen2 and Qwen3 models) or "
        "transformers' own; auto (default): fused on CPU where the model is supported (recorded in every report)",
    )
    p.add_argument(
        "--cpu-matmul",
        # infer/kernels.py CHOICES (kept out of the import)
        choices=["auto", "linear", "transposed", "split", "onednn"],
        default="auto",
        help="CPU: the matmul of few-row forwards (verify, catch-up) and, for split and onednn, one-row steps "
        "too; auto (default): the fastest of torch's F.linear, the weight-as-left-operand product, the weight "
        "split in one block of rows per thread and oneDNN's packed weights, measured at K+1 rows and at one row "
        "on this machine (recorded in every report)",
    )
    p.add_argument(
        "--draft-dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="a draft LM's dtype (it runs alone; outputs stay the target's); auto (default): bfloat16 on a CPU "
        "where a prefill plus the one-row drafts measured faster in it, else the target's",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _adaptive_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--adaptive-k",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="choose each step's K in 0..K from the acceptance and step costs measured so far (0: a plain step, "
        "so a weak draft cannot make decoding much slower than plain); output unchanged, lossless. Default: on "
        "unless -k is given or verification is typical-lossy; with -k, -k is the most it drafts",
    )


def _prompt_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prompts",
        default="chat",
        help="jsonl file (prompt or messages per line), built-in set chat|code, standard benchmark mt-bench|humaneval "
        "(pip packages: scripts/setup.sh), a datasets name, or several comma-separated (mt-bench,humaneval)",
    )
    p.add_argument("--split", default="test", help="split, when --prompts is a datasets name")
    p.add_argument(
        "--num-prompts",
        type=int,
        default=None,
        help="N >= 1 per set (default: all): the first N prompts; mt-bench: N questions, both turns each, "
        "taken round-robin over its 8 categories (16 = 2 per category)",
    )
    p.add_argument(
        "--truncate-prompts",
        action="store_true",
        help="keep the last tokens of a prompt too long for the target's positions (default: refuse it)",
    )
    from draftsmith.evaluation.switches import TEMPLATE_FLAG, TEMPLATE_HELP

    p.add_argument(TEMPLATE_FLAG, dest="chat_template_kwargs", default=None, help=TEMPLATE_HELP)
    p.add_argument("--json", default=None, help="write the result as JSON here")


def bench_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    _prompt_args(p)
    _adaptive_arg(p)
    p.add_argument("--plot", default=None, help="PNG of per-position acceptance")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers baselines")


def eval_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    _prompt_args(p)


def generate_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, draft_required=False)
    _adaptive_arg(p)
    p.add_argument("prompt", help="the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message in the chat template")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--show-draft", action="store_true", help="mark tokens that came from the draft: [[like this]]")


def _tree_config(args):
    from draftsmith.infer.tree import TreeConfig, load_choices

    if (
        args.tree_choices is None
        and args.tree_topk is None
        and args.tree_depth is None
        and args.tree_num_draft_tokens is None
    ):
        if args.tree_children != "topk":
            raise DraftsmithError(
                "--tree-children applies to trees: add --tree-choices or "
                "--tree-topk/--tree-depth/--tree-num-draft-tokens"
            )
        return None
    choices = tuple(load_choices(args.tree_choices)) if args.tree_choices else None
    return TreeConfig(choices, args.tree_topk, args.tree_depth, args.tree_num_draft_tokens, args.tree_children)


def _check_args(args) -> None:
    """Numbers and output paths, before anything loads: one line per mistake, not a traceback
    from deep inside (or a finished run lost to an unwritable --json at the end)."""
    import math

    checks = [
        ("--max-new-tokens", args.max_new_tokens, args.max_new_tokens >= 1, ">= 1"),
        (
            "--temperature",
            args.temperature,
            math.isfinite(args.temperature) and args.temperature >= 0,
            ">= 0 (0 = greedy)" if math.isfinite(args.temperature) else ">= 0 and finite (0 = greedy)",
        ),
        # torch's generators take a 64-bit seed, and prompt i is decoded with seed + i: 0..2**63-1 leaves room.
        ("--seed", args.seed, 0 <= args.seed < 2**63, f"in [0, {2**63 - 1}]"),
        ("--top-k", args.top_k, args.top_k >= 0, ">= 0 (0 = off)"),
        ("--top-p", args.top_p, 0 < args.top_p <= 1, "in (0, 1]"),
    ]
    for flag, value, minimum in (
        ("--num-speculative-tokens", args.num_speculative_tokens, 1),
        ("--tree-topk", args.tree_topk, 1),
        ("--tree-depth", args.tree_depth, 1),
        ("--tree-num-draft-tokens", args.tree_num_draft_tokens, 2),
        ("--num-prompts", getattr(args, "num_prompts", None), 1),
    ):
        if value is not None:
            checks.append(
                (
                    flag,
                    value,
                    value >= minimum,
                    f">= {minimum}" + (" (it counts the root)" if flag == "--tree-num-draft-tokens" else ""),
                )
            )
    for flag, value, ok, rule in checks:
        if not ok:
            raise DraftsmithError(f"{flag} must be {rule}, got {value}")
    if args.verification == "typical-lossy" and not args.draft:  # else it silently decodes plain
        raise DraftsmithError("--verification typical-lossy needs a --draft: it accepts or rejects drafted tokens")
    from draftsmith.evaluation.bench import PLOT_SUFFIXES, check_output_path

    if getattr(args, "json", None):
        check_output_path(args.json, "--json")
    if getattr(args, "plot", None):
        check_output_path(args.plot, "--plot", PLOT_SUFFIXES)


def _context_fit(args, target, drafter):
    """Prompt + --max-new-tokens + the tokens a step drafts must fit the target's positions."""
    from draftsmith.evaluation.prompts import ContextFit
    from draftsmith.infer.engine import Engine

    k = args.k_ceiling if getattr(args, "adaptive_k", False) else args.num_speculative_tokens
    draft_tokens = Engine(target, drafter, k, tree=args.tree).max_draft_tokens if drafter else 0
    cfg = target.config
    positions = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None)
    truncate_flag = "--truncate-prompts" if hasattr(args, "truncate_prompts") else None  # generate has no such option
    return ContextFit(
        positions,
        args.max_new_tokens,
        draft_tokens,
        getattr(args, "truncate_prompts", False),
        target.name,
        truncate_flag,
        "--tree-num-draft-tokens" if args.tree is not None else "-k/--num-speculative-tokens",
    )


def _load_prompts(args, target, drafter):
    from draftsmith.evaluation.prompts import load_prompt_sets, template_line, template_switches
    from draftsmith.models.cache_folder import cache_dir

    print(template_line(*args.template), flush=True)
    with template_switches(args.template[0]):
        return load_prompt_sets(
            args.prompts,
            target.tokenizer,
            args.num_prompts,
            args.split,
            target=target,
            max_new_tokens=args.max_new_tokens,
            cache_dir=cache_dir(),
            progress=not args.quiet,
            fit=_context_fit(args, target, drafter),
        )


def _record_template(result: dict, args) -> None:
    """The report says which chat-template switches its prompts were rendered with, and why."""
    result["chat_template_kwargs"], result["chat_template_kwargs_from"] = args.template


def _setup(args):
    _check_args(args)
    if getattr(args, "adaptive_k", False) and not args.draft:  # asked for by name, it would do nothing
        raise DraftsmithError("--adaptive-k chooses how many tokens a draft proposes per step: it needs --draft")

    from draftsmith.infer.sampling import SamplingConfig
    from draftsmith.models import Checkpoint, Target, load_drafter

    dtype = args.dtype or "auto"
    # drafter.json is read once, here: it names the target to load and the drafter to build.
    ckpt = Checkpoint.find(args.draft, "--draft") if args.draft else None  # a run folder: its best/ or final/
    if ckpt is not None:
        args.draft = str(ckpt.path)
    if hasattr(args, "chat_template_kwargs"):  # the commands that render prompts (not generate)
        from draftsmith.evaluation.prompts import chosen_template

        args.template = chosen_template(args.chat_template_kwargs, ckpt.meta if ckpt is not None else None)
    ckpt_target, note = ckpt.target_to_load() if ckpt is not None else (None, None)
    if args.target and ckpt is not None and not ckpt.matches_target(args.target):
        note = None  # load_drafter warns, naming both targets
    compile_ = {"auto": None, "on": True, "off": False}[getattr(args, "compile", "auto")]
    target = Target.load(
        args.target or ckpt_target or DEFAULT_TARGET,
        dtype=dtype,
        device=args.device,
        compile=compile_,
        device_map=getattr(args, "device_map", None),
        forward=getattr(args, "target_forward", "auto"),
    )
    target.note = note
    drafter = load_drafter(ckpt or args.draft, target, "--target") if args.draft else None
    args.tree = _tree_config(args)
    if args.tree is not None and drafter is None:
        raise DraftsmithError("tree flags need a --draft that drafts trees (medusa or eagle)")
    try:
        sampling = SamplingConfig(args.temperature, args.top_k, args.top_p)
    except ValueError as e:
        raise DraftsmithError(str(e)) from None
    from draftsmith.infer.proposal import resolve_num_speculative_tokens

    # Adaptive K: generate and bench default to it when no -k pins K (eval and crosscheck count
    # acceptance at one K, so they stay fixed); the ceiling is -k, else the drafter's.
    adaptive = getattr(args, "adaptive_k", False)
    if adaptive is None:
        adaptive = args.num_speculative_tokens is None and args.verification == "lossless"
    args.adaptive_k = bool(adaptive) and drafter is not None
    given = args.num_speculative_tokens
    kind = (drafter.kind if drafter is not None else "") or "draft"  # "an eagle", "a medusa"
    what = f"{args.draft} ({'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind} drafter)"
    # -k checked against the drafter's cap (a tree's size comes from the tree flags), else the
    # drafter's kind's default_k (draftsmith/kinds.py) within that cap.
    args.num_speculative_tokens = resolve_num_speculative_tokens(drafter, given, chain=args.tree is None, what=what)
    args.k_ceiling = given
    if args.adaptive_k:
        args.k_ceiling = resolve_num_speculative_tokens(drafter, given, adaptive=True, chain=False)
    if drafter is not None:  # plain decoding runs one row at a time: the default GEMV
        rows = args.num_speculative_tokens + 1
        target.use_cpu_matmul(args.cpu_matmul, rows, drafter, args.draft_dtype)
    return target, drafter, sampling


def cmd_bench(args) -> None:
    from draftsmith.evaluation.bench import BenchInterrupted, format_table, run_bench, save_outputs

    target, drafter, sampling = _setup(args)
    prompts = _load_prompts(args, target, drafter)
    baselines = () if args.no_hf else ("hf_plain", "hf_assisted")
    try:
        result = run_bench(
            target,
            drafter,
            prompts,
            args.num_speculative_tokens,
            args.max_new_tokens,
            sampling,
            args.seed,
            baselines,
            not args.quiet,
            tree=args.tree,
            verification=args.verification,
            adaptive_k=args.k_ceiling if args.adaptive_k else None,
        )
    except BenchInterrupted as e:
        _record_template(e.result, args)
        _keep_partial(e.result, args)
    result["prompts"] = args.prompts
    _record_template(result, args)
    print(format_table(result))
    for path in save_outputs(result, args.json, args.plot, result["draft"]):
        print(f"wrote {path}")


def _keep_partial(result: dict, args) -> None:
    """Ctrl-C during a bench: write the finished runs to --json (marked partial) and say so in one
    line; nothing resumes a bench, and the line does not pretend otherwise."""
    from draftsmith.errors import Interrupted
    from draftsmith.evaluation.bench import write_json

    result["prompts"] = args.prompts
    p = result["partial"]
    runs = f"{p['runs_done']} of {p['runs_total']} runs had finished"
    if not args.json:
        raise Interrupted(f"{runs}; nothing was kept (pass --json FILE to keep finished runs); a rerun starts over")
    write_json(result, args.json)
    raise Interrupted(f"{runs}; they are in {args.json}, marked partial; a rerun starts over (nothing resumes a bench)")


def cmd_eval(args) -> None:
    from draftsmith.evaluation.bench import format_table, run_eval, save_outputs

    target, drafter, sampling = _setup(args)
    prompts = _load_prompts(args, target, drafter)
    result = run_eval(
        target,
        drafter,
        prompts,
        args.num_speculative_tokens,
        args.max_new_tokens,
        sampling,
        args.seed,
        not args.quiet,
        tree=args.tree,
        verification=args.verification,
    )
    result["prompts"] = args.prompts
    _record_template(result, args)
    print(format_table(result))
    for path in save_outputs(result, args.json, None, result["draft"]):
        print(f"wrote {path}")


def cmd_generate(args) -> None:
    from draftsmith.infer.engine import Engine

    target, drafter, sampling = _setup(args)
    tok = target.tokenizer
    if args.chat:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": args.prompt}], add_generation_prompt=True, tokenize=False
        )
        ids = tok(ids, add_special_tokens=False, verbose=False)["input_ids"]
    else:
        ids = tok(args.prompt, verbose=False)["input_ids"]  # a too-long prompt gets our one line, not its warning
    if not ids:
        raise DraftsmithError("the prompt is empty")
    from draftsmith.evaluation.prompts import Prompt

    _context_fit(args, target, drafter)(Prompt(ids, args.prompt, "prompt"), "given")
    k = args.k_ceiling if args.adaptive_k else args.num_speculative_tokens
    engine = Engine(target, drafter, k, tree=args.tree, verification=args.verification, adaptive=args.adaptive_k)
    r = engine.generate(ids, args.max_new_tokens, sampling, seed=args.seed, stop_strings=args.stop)
    if args.show_draft:
        pieces, run = [], []
        for t, d in zip(r.tokens, r.from_draft):  # group consecutive drafted tokens into one span
            if d:
                run.append(t)
                continue
            if run:
                pieces.append("[[" + tok.decode(run) + "]]")
                run = []
            pieces.append(tok.decode([t]))
        print("".join(pieces))
    else:
        print(tok.decode(r.tokens, skip_special_tokens=True))
    summary = {
        "tokens": len(r.tokens),
        "tokens_per_s": round(r.tokens_per_s, 2),
        "stop_reason": r.stop_reason,
        **r.metrics.as_dict(),
    }
    if "adaptive_k" in r.extra:  # the K each step drafted (0: a plain step)
        summary["adaptive_k"] = {key: r.extra["adaptive_k"][key] for key in ("k_max", "k_counts")}
    elif drafter is not None:
        summary["num_speculative_tokens"] = engine.k
    print(json.dumps(summary), file=sys.stderr)
