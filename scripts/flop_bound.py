#!/usr/bin/env python
"""How fast online training can be at best: the FLOP bound, for targets too large to run here.

The closed forms live in train/trainer/flops.py (`draftsmith plan` uses them too); this
script prints them for the targets users train and checks them against bench_train.py's count.

Online distillation runs the frozen target forward on every batch, then the draft forward and
backward. If every FLOP ran at the target forward's speed, training would reach

    bound = F_floor / (F_target_in_training + 3 * F_draft)           (backward ~ 2x forward)

of the target's forward-only tokens/s. Counted per token of a T-token sequence, as torch's
FlopCounterMode counts (2mnk per matmul; attention as two T x T matmuls, causality ignored),
for a Llama-style layer with P = d(H + 2KV)hd + H hd d + 3dI matmul weights:

    F_floor    = 2 L P + 2 V d + 4 L T H hd              (the LM head on every row)
    F_target   = 2 L P + 2 V d s + 4 L T H hd            (in training: head at scored rows only)
    draft LM   = 2 L_d P_d + 2 V d_d s + 4 L_d T H_d hd_d
    EAGLE-3    = 2 (3d) d  +  n [2 (2d)(H + 2KV) hd + 2 H hd d + 6 d I + 4 T H hd + 2 d V_draft s]

with s the fraction of rows scored (the reply tokens), n the unrolled training-time-test steps
(EAGLE-3, Li et al. 2025, sec. 3.2; SpecForge trains with n = 7). `scripts/bench_train.py`
counts the real step with FlopCounterMode; `--check` compares this formula with its JSON.

    python scripts/flop_bound.py                                 # the table for real target sizes
    python scripts/flop_bound.py --check runs/bench_train_eagle3.json --json runs/flop_bound.json
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from draftsmith.evaluation.benchkit import add_flags, markdown_table, parser, run_main, save
from draftsmith.kinds import KINDS
from draftsmith.train.trainer.flops import SHAPES, draft_lm_flops, eagle3_flops, target_flops
from draftsmith.train.trainer.flops import bound as flop_ratio

# (target, drafter): what users train. Draft LMs: a truncated copy (layers=) or another model (shape=).
PAIRS = [
    ("smollm2-135m", {"kind": "draft_lm", "layers": 4}),
    ("smollm2-135m", {"kind": "eagle3", "steps": 7, "draft_vocab": 16384}),
    ("llama-3.1-8b", {"kind": "draft_lm", "shape": "llama-3.2-1b"}),
    ("llama-3.1-8b", {"kind": "eagle3", "steps": 7, "draft_vocab": 32000}),
    ("llama-3.1-8b", {"kind": "eagle3", "steps": 3, "draft_vocab": 32000}),
    ("llama-3.3-70b", {"kind": "draft_lm", "shape": "llama-3.2-1b"}),
    ("llama-3.3-70b", {"kind": "eagle3", "steps": 7, "draft_vocab": 32000}),
]


@dataclass(frozen=True)
class FlopModel:
    """A drafter kind's closed form: its forward FLOPs per token, its table label, and the drafter
    a bench_train.py JSON describes (None: a recipe the formula does not cover)."""

    flops: Callable[[dict, dict, int, float], float]  # (target shape, drafter, T, s)
    describe: Callable[[dict], str]
    from_bench: Callable[[dict], dict | None]


def _draft_lm_flops(target: dict, drafter: dict, T: int, s: float) -> float:
    c = SHAPES[drafter["shape"]] if "shape" in drafter else {**target, "L": drafter["layers"]}
    return draft_lm_flops(c, T, s)


def _draft_lm_bench(b: dict) -> dict | None:
    if not str(b.get("init", "")).startswith("truncated:"):
        return None
    return {"kind": "draft_lm", "layers": int(b["init"].split(":")[1])}


# The kinds with a closed form, by their registry name (draftsmith/kinds.py's KINDS); every other
# trainable kind is counted by `draftsmith plan` (flops.module_cost on its own modules) only.
FLOP_MODELS: dict[str, FlopModel] = {
    "draft_lm": FlopModel(
        _draft_lm_flops,
        lambda d: f"draft LM {d.get('shape') or str(d['layers']) + ' layers'}",
        _draft_lm_bench,
    ),
    "eagle3": FlopModel(
        lambda target, d, T, s: eagle3_flops(target, T, s, d["steps"], d["draft_vocab"]),
        lambda d: f"EAGLE-3, {d['steps']} TTT steps, {d['draft_vocab']} vocab",
        lambda b: {"kind": "eagle3", "steps": b["ttt_steps"], "draft_vocab": b["draft_vocab_size"]},
    ),
}
assert all(name in KINDS and KINDS[name].trainable for name in FLOP_MODELS), "a FLOP model for an unknown kind"


def _model(kind: str) -> FlopModel:
    if kind not in FLOP_MODELS:
        raise ValueError(f"no FLOP model for {kind!r} (closed forms: {', '.join(FLOP_MODELS)})")
    return FLOP_MODELS[kind]


def draft_flops(target: dict, drafter: dict, T: int, s: float) -> float:
    """One draft forward per token (backward counted by the caller)."""
    return _model(drafter["kind"]).flops(target, drafter, T, s)


def bound(target_name: str, drafter: dict, T: int, s: float, shape: dict | None = None) -> dict:
    c = shape or SHAPES[target_name]
    floor, in_training = target_flops(c, T, s)
    draft = draft_flops(c, drafter, T, s)
    return {
        "target": target_name,
        "drafter": describe(drafter),
        "T": T,
        "scored_fraction": s,
        "gflop_per_token": {
            "floor": floor / 1e9,
            "target_in_training": in_training / 1e9,
            "draft_forward": draft / 1e9,
        },
        "bound": flop_ratio(floor, in_training, draft),
    }


def describe(drafter: dict) -> str:
    return _model(drafter["kind"]).describe(drafter)


HEAD = ["target", "drafter", "T", "scored", "GFLOP/token: floor, target in training, draft fwd", "bound"]


def table_row(r: dict) -> list[str]:
    g = r["gflop_per_token"]
    return [
        r["target"],
        r["drafter"],
        str(r["T"]),
        f"{r['scored_fraction']:.2f}",
        f"{g['floor']:.2f}, {g['target_in_training']:.2f}, {g['draft_forward']:.2f}",
        f"{r['bound']:.2f}x",
    ]


def check(path: str) -> list[dict]:
    """The formula against FlopCounterMode's count of the real training step (bench_train.py's
    JSON: one run, or each of its `runs` that a FLOP model covers)."""
    b = json.loads(open(path).read())
    if "runs" not in b:
        return [check_run(path, b)]
    covered = [r for r in b["runs"] if r["drafter"] in FLOP_MODELS and FLOP_MODELS[r["drafter"]].from_bench(r)]
    for r in b["runs"]:
        if r not in covered:
            print(f"check {path}: no FLOP model for {r['recipe']} ({r['drafter']}), skipped")
    return [check_run(path, r) for r in covered]


def check_run(path: str, b: dict) -> dict:
    model = FLOP_MODELS.get(b["drafter"])
    drafter = model.from_bench(b) if model else None
    if drafter is None:
        raise SystemExit(f"{path}: no FLOP model for a {b['drafter']} recipe with init {b.get('init')}")
    m = b["flop_model"]
    r = bound(b["target"], drafter, m["seq_len"], m["scored_fraction"], shape=m["target_shape"])
    print(
        f"check {path}: FlopCounterMode {b['flop_bound']:.3f}x, formula {r['bound']:.3f}x "
        f"(T {m['seq_len']}, scored {m['scored_fraction']:.2f})"
    )
    return {"json": path, "counted": b["flop_bound"], "formula": r["bound"]}


def main(argv=None) -> int:
    p = parser(__doc__)
    p.add_argument("--seq-len", type=int, nargs="+", default=[512, 2048])
    p.add_argument("--scored-fraction", type=float, nargs="+", default=[0.5, 1.0])
    p.add_argument("--check", action="append", default=[], help="bench_train.py JSON: its counted FLOPs vs this model")
    add_flags(p, json=None)
    args = p.parse_args(argv)

    rows = [bound(t, d, T, s) for t, d in PAIRS for T in args.seq_len for s in args.scored_fraction]
    print(markdown_table(HEAD, [table_row(r) for r in rows]))
    checks = [c for path in args.check for c in check(path)]
    save({"rows": rows, "checks": checks}, args.json)
    return 0


if __name__ == "__main__":
    run_main(main)
