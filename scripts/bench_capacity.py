"""The capacity check on a real target: can each drafter kind learn the target's own replies?

For every trainable kind (draftsmith/kinds.py), its recipe for the target (configs/<target>/<kind>.yaml,
else configs/tiny/<kind>.yaml) is trained by the trainer on nothing but the target's greedy replies
to the first --num-prompts prompts of --prompts, --max-new-tokens each, for --steps steps; the
checkpoint then decodes those same prompts with the runtime at the kind's default K, greedy. A kind
whose mean_acceptance_length stays below 0.8 (K + 1) on its own training data has a defect (its
model, loss or runtime path), not too little data: see train/trainer/capacity.py. The table gives
τ per kind against the bar; the JSON (stamped) holds τ per prompt, per-position acceptance, the
last training loss and the training time. The exit status is 1 when a kind misses the bar.

    python scripts/bench_capacity.py --target smollm2-135m-instruct --json results/capacity/smollm2-135m-instruct.json
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
import time

from draftsmith.evaluation.benchkit import machine_line, markdown_table, parser, run_main, save

ROOT = pathlib.Path(__file__).resolve().parents[1]


def arguments(argv=None):
    from draftsmith.kinds import KINDS

    trainable = [name for name, kind in KINDS.items() if kind.trainable]
    ap = parser(
        __doc__,
        target="smollm2-135m-instruct",
        dtype={"default": "float32", "choices": ["float32", "bfloat16"]},
        device=None,
        prompts="chat",
        num_prompts=4,
        max_new_tokens=48,
        steps=300,
        json=None,
    )
    ap.add_argument("--kinds", default=",".join(trainable), help=f"comma-separated (default: {','.join(trainable)})")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: each recipe's)")
    ap.add_argument("--configs", default=str(ROOT / "configs"), help="the recipes folder")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a recipe override for every kind checked (repeatable), e.g. drafter.divergence=fkl",
    )
    args = ap.parse_args(argv)
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for item in args.set:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            ap.error(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. drafter.divergence=fkl")
    unknown = [k for k in args.kinds if k not in trainable]
    if unknown:
        ap.error(f"--kinds: {', '.join(unknown)} not among the trainable kinds ({', '.join(trainable)})")
    return args


def main(args) -> dict:
    from draftsmith.models import Target
    from draftsmith.train.trainer.capacity import BAR, check_capacity, recipe_for

    target = Target.load(args.target, dtype=args.dtype, device=args.device)
    kinds = {}
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        for kind in args.kinds:
            recipe = recipe_for(pathlib.Path(args.configs), args.target, kind)
            t0 = time.perf_counter()
            result = check_capacity(
                target,
                kind,
                recipe,
                pathlib.Path(tmp) / kind,
                num_prompts=args.num_prompts,
                max_new_tokens=args.max_new_tokens,
                steps=args.steps,
                lr=args.lr,
                prompts=args.prompts,
                overrides=[f"--{item}" for item in args.set],
            )
            kinds[kind] = {
                **result.as_dict(),
                "recipe": str(recipe.relative_to(ROOT) if recipe.is_relative_to(ROOT) else recipe),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(
                f"{kind}: tau {result.mean_acceptance_length:.2f} (bar {result.bar:.2f}) "
                f"{'passed' if result.passed else 'BELOW THE BAR'}",
                flush=True,
            )
    return {
        "target": args.target,
        "dtype": args.dtype,
        "hardware": machine_line(target.device),
        "bar": f"{BAR} x (K + 1)",
        "settings": {k: getattr(args, k) for k in ("prompts", "num_prompts", "max_new_tokens", "steps", "lr", "set")},
        "kinds": kinds,
    }


def table(result: dict) -> str:
    rows = [
        [
            kind,
            str(r["num_speculative_tokens"]),
            f"{r['mean_acceptance_length']:.2f}",
            f"{r['bar']:.2f}",
            " ".join(f"{t:.2f}" for t in r["per_prompt"]),
            "yes" if r["outputs_match_target"] else "NO",
            "pass" if r["passed"] else "FAIL",
        ]
        for kind, r in result["kinds"].items()
    ]
    return markdown_table(["kind", "K", "tau", "bar", "tau per prompt", "outputs = target's", "result"], rows)


def run(args) -> int:
    result = main(args)
    print(table(result))
    save(result, args.json)
    below = [kind for kind, r in result["kinds"].items() if not r["passed"]]
    if below:
        print(f"below the bar: {', '.join(below)}", file=sys.stderr)
    return 1 if below else 0


if __name__ == "__main__":
    run_main(run, arguments())
