#!/usr/bin/env python
"""The evidence: every drafter kind trained for the same time on the same data, then all of them
(and the Qwen2.5-Coder 0.5B -> 1.5B pair, a draft that needs no training) benchmarked in one run
on held-out chat and code prompts, repeated, with medians and spread.

Stages, each skipped when its output exists, so a killed run resumes where it stopped:

1. train: for each kind, `draftsmith train RECIPES/KIND.yaml` for --minutes (the trainer keeps
   the budget across resumes) into RUNS/<target>-<kind>-<M>min; a finished checkpoint there is
   reused if its recipe.yaml has the same kind, data and optim.max_minutes, refused otherwise.
2. bench: --repeats rounds; in each, plain decoding and every method run on the same prompts
   interleaved prompt by prompt (draftsmith/evaluation/bench.py: run_compare), so the ratios share the
   machine's noise; each round is one file under OUT/repeats/.
3. report: medians and [min-max] over rounds of the speedup (Spec-Bench: mean per-prompt
   tokens/s over plain's), τ (= mean_acceptance_length, counting the bonus token; greedy
   decoding makes it the same in every round) overall, by domain and by context-length bucket;
   OUT/results.json, OUT/table.md (the README's table) and OUT/per_position_acceptance.png.

    python scripts/bench_all.py                      # ~2.5 h on a 2-core CPU, all stages
    python scripts/bench_all.py --repeats 5          # later: adds rounds 4-5, reuses the rest
    python scripts/bench_all.py --prompts mt-bench,humaneval --num-prompts 16 --max-new-tokens 128 \
        --out runs/bench_all_mtbench                 # the papers' benchmarks: 2 questions per MT-Bench
                                                     # category (both turns) and 16 HumanEval problems

MT-Bench and HumanEval come from pinned pip packages (scripts/setup.sh); MT-Bench's second turn
follows the target's own greedy answer to the first, decoded once and cached (draftsmith/evaluation/prompts.py).
The table has τ (speedup) per MT-Bench category, HumanEval and turn for every method, and the
machine's CPU model and flags (avx512f, avx512_bf16, amx_bf16) in results.json and its header.

Run it on an otherwise idle machine: timed training and timing both suffer from other work.
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from draftsmith.errors import DraftsmithError, run_command
from draftsmith.evaluation.bench import (
    GROUP_FIELDS,
    Method,
    check_output_path,
    cpu_info,
    format_compare,
    format_cpu,
    group_columns,
    plot_acceptance,
    run_compare,
    write_json,
)
from draftsmith.evaluation.benchkit import add_flags, parser
from draftsmith.evaluation.prompts import ContextFit, check_limit, load_prompt_sets
from draftsmith.evaluation.report import write_report
from draftsmith.infer.engine import Engine
from draftsmith.infer.sampling import SamplingConfig
from draftsmith.infer.tree import TreeConfig
from draftsmith.kinds import KINDS as KIND_REGISTRY

# What each kind trains and measures here is its registry entry's `bench` (draftsmith/kinds.py):
# optimizer steps per training minute measured on a 2-core AMD EPYC without AVX-512 (DFlash and
# PARD with AVX-512; README "Training", "Medusa results", "EAGLE results"), which size the cosine
# schedule so that the time budget, not the step count, ends training. 2x head-room: the machines
# of this kind differ (an Intel Xeon with AMX trains the draft LM at 5 steps/min, 1.5x its figure),
# and a run that stops at its step count before its budget would compare kinds at unequal budgets;
# more head-room would leave the cosine schedule far from its floor when the budget ends.
BENCHED = {kind.name: kind.bench for kind in KIND_REGISTRY.values() if kind.bench is not None}
KINDS = tuple(BENCHED)
STEPS_PER_MINUTE = {name: b.steps_per_minute for name, b in BENCHED.items()}
TRAIN_FLAGS = {name: list(b.train_flags) for name, b in BENCHED.items()}  # beside the recipe
TREE = TreeConfig(topk=4, depth=4, num_draft_tokens=17)  # 16 drafted nodes per step for every tree
# kind -> the shapes benchmarked (name, k, tree): each kind's best on this CPU in the earlier runs
METHODS = {name: [(m, k, TREE if tree else None) for m, k, tree in b.methods] for name, b in BENCHED.items()}
PAIR = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct", 4)  # target, draft, k


def checkpoint_dir(args, kind: str, variant: str = "") -> Path:
    short = Path(args.recipes).name.split("-")[0]
    return Path(args.runs_dir) / f"{short}-{kind.replace('_', '-')}{variant}-{args.minutes:g}min"


def check_reusable(run: Path, kind: str, data: dict, minutes: float) -> None:
    """A finished checkpoint is reused only if it was trained the same way (kind, budget and the
    whole resolved data section: source, regeneration, filters); say what differs."""
    path = run / "recipe.yaml"
    if not path.is_file():
        raise DraftsmithError(f"{run}/final exists without recipe.yaml: not a draftsmith training run; move it away")
    old = yaml.safe_load(path.read_text())
    want = {"drafter.kind": kind, "optim.max_minutes": float(minutes), **{f"data.{k}": v for k, v in data.items()}}
    got = {
        "drafter.kind": old["drafter"]["kind"],
        "optim.max_minutes": old["optim"].get("max_minutes"),
        **{f"data.{k}": old["data"].get(k) for k in data},
    }
    diff = [f"{k}: {got[k]!r} (wanted {want[k]!r})" for k in want if got[k] != want[k]]
    if diff:
        raise DraftsmithError(
            f"{run} was trained differently ({'; '.join(diff)}): move it away or pick another --runs-dir"
        )


def resolved_data(recipe_path: Path, flags: list[str]) -> dict:
    """The data section the trainer will use: the recipe with the command-line flags applied."""
    import dataclasses

    from draftsmith.train.config import load_recipe

    return dataclasses.asdict(load_recipe(recipe_path, [f for f in flags if f.startswith("--data.")]).data)


def train(args, kind: str, variant: str = "", flags: list[str] | None = None) -> dict:
    """Train `kind` for the budget (or reuse the finished run). `flags`: extra recipe overrides
    (default --train-flags); `variant` names a run trained with other ones (e.g. -chitchat)."""
    recipe_path = Path(args.recipes) / f"{kind}.yaml"
    if not recipe_path.is_file():
        raise DraftsmithError(f"no recipe for {kind}: {recipe_path} does not exist")
    flags = list(args.train_flags if flags is None else flags)
    data = resolved_data(recipe_path, flags)
    run = checkpoint_dir(args, kind, variant)
    if (run / "final").is_dir():
        check_reusable(run, kind, data, args.minutes)
        print(f"[train] {kind}{variant}: reusing {run}/final")
    else:
        steps = max(4, math.ceil(STEPS_PER_MINUTE[kind] * args.minutes * 2))
        cmd = [
            sys.executable,
            "-m",
            "draftsmith.train",
            str(recipe_path),
            "--output-dir",
            str(run),
            "--resume",
            f"--optim.max_minutes={args.minutes}",
            f"--optim.max_steps={steps}",
            "--checkpoint.save_every=10",
            "--logging.eval_every=100000",
            "--logging.eval_batches=4",
            "--logging.acceptance_prompts=4",
            "--logging.progress=false",
            *TRAIN_FLAGS[kind],
            *flags,
        ]
        log = Path(f"{run}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        print(f"[train] {kind}: {args.minutes:g} min into {run} (log {log}) ...", flush=True)
        t = time.time()
        with open(log, "a") as f:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            raise DraftsmithError(f"training {kind} failed (exit {rc}); see {log}; rerun to resume")
        print(f"[train] {kind}: done in {(time.time() - t) / 60:.1f} min")
    summary = json.loads((run / "train_summary.json").read_text()) if (run / "train_summary.json").is_file() else {}
    return {
        "checkpoint": str(run / "final"),
        "steps": summary.get("steps"),
        "tokens": summary.get("tokens"),
        "train_seconds": summary.get("train_seconds"),
        "minutes": args.minutes,
        "data": data.get("path"),
        "regenerated": bool(data.get("regenerate")),
        "regenerate_max_rows": data.get("regenerate_max_rows"),
        "flags": flags,
    }


def plan(args) -> dict:
    """What a round measures: a rerun with other settings must not mix its rounds with these."""
    return {
        "recipes": args.recipes,
        "kinds": args.kinds,
        "minutes": args.minutes,
        "prompts": args.prompts,
        "train_flags": args.train_flags,
        "compare_data": args.compare_data,
        "num_prompts": args.num_prompts,
        "max_new_tokens": args.max_new_tokens,
        "pair": args.pair,
        "context_edges": args.context_edges,
        "tree": [TREE.topk, TREE.depth, TREE.num_draft_tokens],
    }


def busy_cores(seconds: float = 1.0) -> float:
    """Cores kept busy by other processes over `seconds` (/proc/stat; the load average would
    still count the training that just ended)."""

    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait

    try:
        t0, i0 = sample()
        time.sleep(seconds)
        t1, i1 = sample()
    except OSError:  # not Linux
        return 0.0
    return (os.cpu_count() or 1) * (1 - (i1 - i0) / max(1, t1 - t0))


def bench_round(args, name: str, target_name: str, dtype: str, methods: list[tuple], path: Path) -> None:
    """One round on one target: plain + methods [(name, draft, k, tree)], interleaved."""
    from draftsmith.models import Target, load_drafter
    from draftsmith.models.cache_folder import cache_dir

    target = Target.load(target_name, dtype=dtype)
    drafters = {}
    for _, draft, _, _ in methods:
        if draft not in drafters:
            drafters[draft] = load_drafter(draft, target)
    ms = [Method(n, drafters[d], k, tree) for n, d, k, tree in methods]
    draft_tokens = max(Engine(target, m.drafter, m.k, tree=m.tree).max_draft_tokens for m in ms)
    fit = ContextFit(
        getattr(target.config, "max_position_embeddings", None),
        args.max_new_tokens,
        draft_tokens,
        model=target_name,
        truncate_flag=None,
    )
    # MT-Bench's turn 2 follows the target's own greedy answer to turn 1: decoded once, cached on disk.
    prompts = load_prompt_sets(
        args.prompts,
        target.tokenizer,
        args.num_prompts,
        target=target,
        max_new_tokens=args.max_new_tokens,
        cache_dir=cache_dir(),
        progress=args.progress,
        fit=fit,
    )
    load = busy_cores()
    if load > 0.3:
        print(f"warning: {load:.1f} cores busy before {path.name}: another process is running, timings will be noisy")
    result = run_compare(
        target,
        ms,
        prompts,
        args.max_new_tokens,
        SamplingConfig(temperature=0.0),
        args.seed,
        progress=args.progress,
        context_edges=tuple(args.context_edges),
    )
    result.update(round_name=path.stem, busy_cores_before=round(load, 2), pair=name)
    print(format_compare(result), flush=True)
    write_json(result, str(path))  # atomic: a round is either whole or absent
    del target, drafters, ms
    gc.collect()


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _group(cells) -> dict:
    cells = list(cells)
    out = {
        "mean_acceptance_length": _spread([c["mean_acceptance_length"] for c in cells]),
        "speedup": _spread([c["speedup"] for c in cells]),
    }
    if cells[0].get("draft_acceptance_rate") is not None:
        out["draft_acceptance_rate"] = statistics.median(c["draft_acceptance_rate"] for c in cells)
    if cells[0].get("per_position_acceptance"):
        out["per_position_acceptance"] = [
            statistics.median(v) for v in zip(*[c["per_position_acceptance"] for c in cells])
        ]
    return out


def aggregate(rounds: list[dict]) -> dict:
    """Per method: median and [min, max] over rounds of speedup and tokens/s, τ and its spread,
    τ, acceptance and speedup by category (domain), by prompt set and by MT-Bench turn, τ by
    context bucket (pooled over rounds), outputs == plain in all."""
    out = {}
    for name in rounds[0]["methods"]:
        rows = [r["methods"][name] for r in rounds if name in r["methods"]]
        row = {
            "speedup": _spread([x["speedup"] for x in rows]),
            "tokens_per_s": _spread([x["tokens_per_s"] for x in rows]),
            "mean_acceptance_length": _spread([x["mean_acceptance_length"] for x in rows]),
            "outputs_match_plain": all(x["outputs_match_plain"] is not False for x in rows),
        }
        if name != "plain":
            row["per_position_acceptance"] = [
                statistics.median(v) for v in zip(*[x["per_position_acceptance"] for x in rows])
            ]
            row["draft"], row["drafter_kind"] = rows[0].get("draft"), rows[0].get("drafter_kind")
            costs = [x["step_costs_s"] for x in rows if x.get("step_costs_s")]
            if costs:  # what one step costs, as a multiple of one plain decode step (medians over rounds)
                row["step_costs"] = {
                    "t_step_ms": statistics.median(c["t_step"] for c in costs) * 1e3,
                    "draft_over_step": statistics.median(c["t_draft_k"] / c["t_step"] for c in costs),
                    "verify_over_step": statistics.median(c["t_verify"] / c["t_step"] for c in costs),
                    "predicted_speedup": statistics.median(x["predicted_speedup"] for x in rows),
                }
            loop = [x for x in rows if x.get("step_costs_in_loop_s")]
            if loop and costs:  # the same, as the engine timed them inside its loop
                row["step_costs"].update(
                    t_step_in_loop_ms=statistics.median(x["step_costs_in_loop_s"]["t_step"] for x in loop) * 1e3,
                    draft_over_step_in_loop=statistics.median(
                        x["step_costs_in_loop_s"]["t_draft"] / x["step_costs_in_loop_s"]["t_step"] for x in loop
                    ),
                    verify_over_step_in_loop=statistics.median(
                        x["step_costs_in_loop_s"]["t_verify"] / x["step_costs_in_loop_s"]["t_step"] for x in loop
                    ),
                    predicted_speedup_in_loop=statistics.median(x["predicted_speedup_in_loop"] for x in loop),
                )
        for field in GROUP_FIELDS:  # τ, acceptance and speedup per category / set / MT-Bench turn
            groups = list(dict.fromkeys(g for x in rows for g in x.get(field, {})))
            if groups:
                row[field] = {g: _group(x[field][g] for x in rows if g in x.get(field, {})) for g in groups}
        buckets: dict[str, list[float]] = {}
        for x in rows:
            for b, v in x.get("by_context", {}).items():
                acc = buckets.setdefault(b, [0.0, 0])
                acc[0] += v["mean_acceptance_length"] * v["steps"]
                acc[1] += v["steps"]
        row["by_context"] = {b: {"mean_acceptance_length": t / n, "steps": n} for b, (t, n) in buckets.items()}
        out[name] = row
    return out


def markdown(report: dict) -> str:
    """The README table, shaped as the EAGLE / SpecForge papers' (rows methods, columns the
    MT-Bench categories, HumanEval, the MT-Bench turns, overall): each cell τ with the speedup
    beside it (medians over rounds), then τ by context bucket and the speedup's spread."""
    fmt = lambda s: f"{s['median']:.2f}" + (f" [{s['min']:.2f}–{s['max']:.2f}]" if s["n"] > 1 else "")  # noqa: E731
    cell = lambda c: f"{c['mean_acceptance_length']['median']:.2f} ({c['speedup']['median']:.2f}×)"  # noqa: E731
    lines = []
    for _pair, res in report["pairs"].items():
        rows, meta = res["methods"], res["meta"]
        cols = group_columns(rows)
        if len([c for c in cols if c[0] == "by_domain"]) < 2:  # one category: the overall column says it all
            cols = [c for c in cols if c[0] != "by_domain"]
        buckets = list(dict.fromkeys(b for r in rows.values() for b in r.get("by_context", {})))
        on_cpu = meta.get("cpu") and str(meta.get("device") or "cpu").startswith("cpu")
        lines += [
            f"**{meta['target']}**, {meta['dtype']} on {format_cpu(meta['cpu']) if on_cpu else meta['hardware']}, "
            f"greedy, {meta['num_prompts']} prompts × "
            f"{meta['max_new_tokens']} tokens, {res['rounds']} rounds; plain decoding "
            f"{rows['plain']['tokens_per_s']['median']:.1f} tok/s; "
            "cells: τ (speedup)",
            "",
        ]
        head = (
            ["method", "trained", "τ"]
            + [f"τ {g}" for _, g in cols]
            + [f"τ ctx {b}" for b in buckets]
            + ["speedup median [min–max]", "= plain"]
        )
        costed = {n: r for n, r in rows.items() if r.get("step_costs")}
        if costed:  # the drafting cost first: it, not the acceptance, decides whether speculation pays here
            lines += [
                "| method | drafting / step | verify / step | step ms | τ | predicted | in the loop: drafting / step | "
                "verify / step | predicted | measured speedup |",
                "|---|---|---|---|---|---|---|---|---|---|",
            ]
            for name, r in costed.items():
                c = r["step_costs"]
                loop = (
                    f"{c['draft_over_step_in_loop']:.2f}× | {c['verify_over_step_in_loop']:.2f}× | "
                    f"{c['predicted_speedup_in_loop']:.2f}×"
                    if "draft_over_step_in_loop" in c
                    else "— | — | —"
                )
                lines.append(
                    f"| {name} | {c['draft_over_step']:.2f}× | {c['verify_over_step']:.2f}× | {c['t_step_ms']:.1f} | "
                    f"{r['mean_acceptance_length']['median']:.2f} | {c['predicted_speedup']:.2f}× | {loop} | "
                    f"{fmt(r['speedup'])}× |"
                )
            lines.append("")
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name, r in rows.items():
            if name == "plain":
                continue
            trained = res.get("training", {}).get(name, "—")
            cells = [name, trained, f"{r['mean_acceptance_length']['median']:.2f}"]
            cells += [cell(r[f][g]) if g in r.get(f, {}) else "—" for f, g in cols]
            cells += [
                f"{r['by_context'][b]['mean_acceptance_length']:.2f} ({r['by_context'][b]['steps']})"
                if b in r["by_context"]
                else "—"
                for b in buckets
            ]
            cells += [fmt(r["speedup"]) + "×", "yes" if r["outputs_match_plain"] else "NO"]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def arguments():
    ap = parser(__doc__)
    ap.add_argument("--recipes", default="configs/smollm2-135m-instruct", help="folder with <kind>.yaml recipes")
    ap.add_argument("--kinds", default=",".join(KINDS), help="drafter kinds to train and compare")
    ap.add_argument("--minutes", type=float, default=24, help="training budget of every kind")
    ap.add_argument("--runs-dir", default="runs", help="where checkpoints live (and are reused from)")
    ap.add_argument(
        "--pair", default="qwen", choices=["qwen", "none"], help="also bench the Qwen2.5-Coder 0.5B->1.5B pair"
    )
    add_flags(
        ap,
        prompts={
            "default": "chat,code",
            "help": "prompt sets, comma-separated: chat, code, mt-bench, humaneval, jsonl files",
        },
        num_prompts={
            "default": 4,
            "help": "per prompt set; mt-bench: questions (both turns each), round-robin over its 8 categories "
            "(16 = 2 each)",
        },
        max_new_tokens=48,
        repeats=3,
    )
    ap.add_argument("--context-edges", type=lambda s: [int(x) for x in s.split(",")], default=[64, 128, 256])
    add_flags(ap, seed=0, out="runs/bench_all")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument(
        "--train-flags",
        default="",
        help="recipe overrides for every kind's training, written with '=', e.g. "
        "the regeneration settings: --train-flags='--data.regenerate=true --data.regenerate_max_rows=800'. Fill "
        "the cache first (`draftsmith train RECIPE --data-only ...`, e.g. through a server), so that no kind's "
        "training budget pays for it",
    )
    ap.add_argument(
        "--compare-data",
        default=None,
        help="also train EAGLE-3 for the same budget on this dataset as it is "
        "(e.g. chitchat: no --train-flags), benched beside the others as eagle3_<name>_*",
    )
    return ap.parse_args()


def main() -> int:
    args = arguments()
    import shlex

    args.train_flags = shlex.split(args.train_flags)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars would bury the tables
    check_limit(args.num_prompts)
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(args.kinds) - set(KINDS)
    if unknown:
        raise DraftsmithError(f"--kinds: unknown {sorted(unknown)} (known: {', '.join(KINDS)})")
    out = Path(args.out)
    check_output_path(str(out / "plan.json"), "--out")  # one line now, not a traceback after the training
    (out / "repeats").mkdir(parents=True, exist_ok=True)
    plan_path, want = out / "plan.json", plan(args)
    if plan_path.is_file() and (old := json.loads(plan_path.read_text())) != want:
        diff = ", ".join(f"{k}: {old.get(k)!r} -> {want[k]!r}" for k in want if old.get(k) != want[k])
        raise DraftsmithError(
            f"{out} holds rounds measured with other settings ({diff}): use another --out or delete it"
        )
    write_json(want, str(plan_path))

    training = {kind: train(args, kind) for kind in args.kinds}
    variants = {}  # method prefix -> kind, for the comparison run
    if args.compare_data:
        name = f"eagle3_{args.compare_data.replace('-', '_')}"
        training[name] = train(args, "eagle3", f"-{args.compare_data}", [f"--data.path={args.compare_data}"])
        variants[name] = "eagle3"

    target_name = (
        yaml.safe_load((Path(args.recipes) / f"{args.kinds[0]}.yaml").read_text())["model"]["target"]
        if args.kinds
        else None
    )
    pairs = {}
    if args.kinds:
        methods = [(n, training[kind]["checkpoint"], k, tree) for kind in args.kinds for n, k, tree in METHODS[kind]]
        methods += [
            (n.replace("eagle3", name, 1), training[name]["checkpoint"], k, tree)
            for name, kind in variants.items()
            for n, k, tree in METHODS[kind]
        ]
        pairs[Path(args.recipes).name] = (target_name, "float32", methods)
    if args.pair == "qwen":
        pairs["qwen-pair"] = (PAIR[0], "bfloat16", [(f"qwen0.5b_k{PAIR[2]}", PAIR[1], PAIR[2], None)])
    skipped = {}
    for i in range(1, args.repeats + 1):
        for name, (tgt, dtype, methods) in pairs.items():
            path = out / "repeats" / f"{name}-r{i}.json"
            if path.is_file() or name in skipped:
                continue
            print(f"[bench] {name} round {i}/{args.repeats}", flush=True)
            try:
                bench_round(args, name, tgt, dtype, methods, path)
            except DraftsmithError as e:
                if name != "qwen-pair":
                    raise
                skipped[name] = str(e)  # optional models (scripts/install_qwen.sh) not installed
                print(f"[bench] skipping the Qwen pair: {e}")

    report = {
        "command": " ".join(sys.argv),
        "plan": want,
        "cpu": cpu_info(),
        "training": training,
        "skipped": skipped,
        "pairs": {},
    }
    for name in pairs:
        files = sorted((out / "repeats").glob(f"{name}-r*.json"), key=lambda p: int(p.stem.rsplit("-r", 1)[1]))
        rounds = [json.loads(p.read_text()) for p in files if int(p.stem.rsplit("-r", 1)[1]) <= args.repeats]
        if not rounds:
            continue
        meta = {
            k: rounds[0].get(k)
            for k in ("target", "dtype", "device", "hardware", "cpu", "versions", "num_prompts", "max_new_tokens")
        }

        def trained_on(t):
            regen = f", {t['regenerate_max_rows'] or 'all'} rows regenerated" if t.get("regenerated") else ""
            return f"{t['minutes']:g} min, {t['steps']} steps, {t['tokens']} tokens of {t.get('data')}{regen}"

        trained = {n: trained_on(training[kind]) for kind in args.kinds for n, _, _ in METHODS[kind]}
        trained.update(
            {
                n.replace("eagle3", name, 1): trained_on(training[name])
                for name, kind in variants.items()
                for n, _, _ in METHODS[kind]
            }
        )
        trained.update({n: "none (pretrained)" for n, _, _, _ in pairs[name][2] if n.startswith("qwen")})
        report["pairs"][name] = {"meta": meta, "rounds": len(rounds), "methods": aggregate(rounds), "training": trained}
    write_report(report, out / "results.json")
    table = markdown(report)
    (out / "table.md").write_text(f"`{report['command']}`\n\nCPU: {format_cpu(report['cpu'])}\n\n{table}")
    print(table)
    curves = {
        f"{n} ({p})" if p != Path(args.recipes).name else n: r
        for p, res in report["pairs"].items()
        for n, r in res["methods"].items()
        if n != "plain"
    }
    if curves:
        plot_acceptance(
            {n: {**r, "mean_acceptance_length": r["mean_acceptance_length"]["median"]} for n, r in curves.items()},
            str(out / "per_position_acceptance.png"),
        )
    print(f"wrote {out}/results.json, table.md, per_position_acceptance.png")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main))
