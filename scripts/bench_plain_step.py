#!/usr/bin/env python
"""A plain step inside the speculative engine against a plain step of the plain engine, per kind.

The adaptive runtime decodes plainly (K = 0) wherever drafting does not pay, and its probes sit
between plain steps; such a step must cost what plain decoding's step costs (at most 1.02x), for
every drafter kind: the drafter runs nothing then, and catches up on what it skipped at its next
draft, in one batched forward. Per kind, an adaptive engine is forced to draft once (so the
drafter has started and drafted) and then to step plainly, with the real policy's bookkeeping
(its choose() still runs); the plain engine decodes the same prompt. Runs alternate (drift hits
both alike); each step is timed by the loop itself (on CUDA with `time_steps`, which
synchronises every step in both engines). The ratio of the median step times is the figure.

Drafters: an untrained instance of each registered kind built for the target from its smoke
recipe (configs/tiny/<kind>.yaml; a plain step never runs it, so its weights do not matter), or
--draft KIND=SPEC for a real checkpoint. Prints a table, writes JSON.

    python scripts/bench_plain_step.py --target smollm2-135m-instruct --json results/plain_step_smollm2.json
    python scripts/bench_plain_step.py --target tiny-random --max-new-tokens 8 --repeats 1   # seconds
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import tempfile

from draftsmith.evaluation.benchkit import machine_line, markdown_table, parser, run_main, save

PROMPT = "Explain in a few sentences why the sky is blue, then give one everyday example of the same effect."


def build_drafters(target, kinds: list[str], specs: dict[str, str], folder: pathlib.Path) -> dict:
    """kind -> drafter: --draft KIND=SPEC where given, else the kind's untrained instance built by
    its registry entry's `tiny_ref` for this target (its smoke recipe's drafter section)."""
    from draftsmith.kinds import KINDS, resolve
    from draftsmith.models import load_drafter

    out = {}
    for name in kinds:
        kind = KINDS[name]
        if name in specs:
            out[name] = load_drafter(specs[name], target)
        else:
            out[name] = resolve(kind.tiny_ref)(kind, target, folder / name)[0]
    return out


def forced_plain(k_start: int):
    """The real adaptive policy, its choice overridden: draft k_start at the first step, then
    plain steps (its choose() and observe() still run: their cost is part of the step)."""
    from draftsmith.infer.adaptive import AdaptiveK

    class ForcedPlain(AdaptiveK):
        def choose(self) -> int:
            super().choose()
            self.history[-1] = k_start if len(self.history) == 1 else 0
            return self.history[-1]

    return ForcedPlain


def step_times(result, skip: int) -> list[float]:
    """Seconds of each step the loop timed (drafting + verifying), the first `skip` left out."""
    t = result.extra["step_times_s"]
    return [a + b for a, b in zip(t["draft"], t["verify"])][skip:]


def measure(target, drafter, prompt_ids, max_new_tokens: int, repeats: int, engine_module) -> dict:
    from draftsmith.infer import Engine

    plain = Engine(target)
    spec = Engine(target, drafter, adaptive=True)
    policy = forced_plain(spec.k_start)
    for e in (plain, spec):
        e.time_steps = True  # CUDA: every step synchronised and timed, in both engines alike
    times = {"plain engine": [], "speculative engine": []}
    original = engine_module.AdaptiveK
    engine_module.AdaptiveK = policy
    try:
        for r in range(repeats + 1):  # the first round warms up
            a = plain.generate(prompt_ids, max_new_tokens, eos_token_ids=())
            b = spec.generate(prompt_ids, max_new_tokens, eos_token_ids=())
            if b.tokens != a.tokens:
                raise SystemExit(f"{drafter.kind}: the speculative engine's output differs from plain decoding")
            if r:
                times["plain engine"] += step_times(a, 1)
                times["speculative engine"] += step_times(b, 1)  # its first step drafted
    finally:
        engine_module.AdaptiveK = original
    plain_s, spec_s = (statistics.median(times[n]) for n in ("plain engine", "speculative engine"))
    return {
        "kind": drafter.kind,
        "draft": drafter.name,
        "steps_timed": len(times["plain engine"]),
        "plain_engine_step_ms": plain_s * 1e3,
        "speculative_engine_plain_step_ms": spec_s * 1e3,
        "ratio": spec_s / plain_s,
    }


def main(argv=None) -> int:
    p = parser(
        __doc__,
        target="smollm2-135m-instruct",
        dtype={"default": "float32", "choices": ["float32", "bfloat16", "auto"]},
        device=None,
        max_new_tokens=64,
        repeats=5,
        json=None,
    )
    p.add_argument("--kinds", default=None, help="comma-separated registry names (default: every kind)")
    p.add_argument("--draft", action="append", default=[], metavar="KIND=SPEC", help="a checkpoint for a kind")
    args = p.parse_args(argv)
    import torch

    import draftsmith.infer.engine as engine_module
    from draftsmith.errors import DraftsmithError
    from draftsmith.kinds import KINDS
    from draftsmith.models import Target

    kinds = args.kinds.split(",") if args.kinds else list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise DraftsmithError(f"--kinds: unknown kind(s) {', '.join(unknown)} (registered: {', '.join(KINDS)})")
    specs = dict(s.split("=", 1) for s in args.draft if "=" in s)
    target = Target.load(args.target, dtype=args.dtype, device=args.device)
    prompt_ids = target.tokenizer(PROMPT)["input_ids"]
    with tempfile.TemporaryDirectory() as folder:
        drafters = build_drafters(target, kinds, specs, pathlib.Path(folder))
        torch.manual_seed(0)
        rows = [
            measure(target, d, prompt_ids, args.max_new_tokens, args.repeats, engine_module) for d in drafters.values()
        ]
    print(machine_line(target.device), f"| {target.name} {str(target.dtype).replace('torch.', '')}")
    print(
        markdown_table(
            ["kind", "plain engine step ms", "plain step inside the speculative engine ms", "ratio"],
            [
                [
                    r["kind"],
                    f"{r['plain_engine_step_ms']:.2f}",
                    f"{r['speculative_engine_plain_step_ms']:.2f}",
                    f"{r['ratio']:.3f}",
                ]
                for r in rows
            ],
        )
    )
    result = {
        "target": target.name,
        "dtype": str(target.dtype).replace("torch.", ""),
        "device": str(target.device),
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "prompt_tokens": len(prompt_ids),
        "kinds": rows,
        "max_ratio": max(r["ratio"] for r in rows),
    }
    save(result, args.json, argv=sys.argv)
    return 0


if __name__ == "__main__":
    run_main(main)
