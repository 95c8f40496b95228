"""What the benchmark programs (scripts/bench_*.py, scripts/peer/) share: their common flags,
their tables and their JSON, so each script's `main` says only what it measures.

    p = parser(__doc__, target="smollm2-135m-instruct", dtype="bfloat16", k=4, json=None)
    p.add_argument("--repeats", type=int, default=3)        # the script's own flags
    args = p.parse_args(argv)
    ...
    print(markdown_table(["method", "tau"], [[name, f"{tau:.2f}"] for name, tau in rows]))
    save(result, args.json)                                  # stamped (report.py), then "wrote PATH"

Nothing heavy is imported here: torch and the runtime load inside the helpers that need them.
"""

from __future__ import annotations

import argparse
import sys

# name -> (option strings, argparse settings): one spelling of each flag the scripts share.
# A script gives each its own default (and may override any setting, e.g. its help).
FLAGS = {
    "recipe": (("recipe",), {}),
    "target": (("--target",), {}),
    "draft": (("--draft",), {}),
    "drafts": (
        ("--draft",),
        {"action": "append", "required": True, "help": "any drafter spec load_drafter accepts; repeat for several"},
    ),
    "dtype": (("--dtype",), {}),
    "device": (("--device",), {}),
    "k": (("-k",), {"type": int}),
    "num_speculative_tokens": (("-k", "--num-speculative-tokens"), {"type": int}),
    "prompts": (("--prompts",), {}),
    "num_prompts": (("--num-prompts",), {"type": int}),
    "max_new_tokens": (("--max-new-tokens",), {"type": int}),
    "steps": (("--steps",), {"type": int}),
    "repeats": (("--repeats",), {"type": int}),
    "seed": (("--seed",), {"type": int}),
    "json": (("--json",), {}),
    "out": (("--out",), {}),
}


# The flags of the scripts that put drafters beside plain decoding on one target: the built-in
# SmolLM2 and bfloat16 unless told, --draft given once per drafter.
COMPARE_FLAGS = {
    "target": "smollm2-135m-instruct",
    "drafts": {},
    "dtype": {"default": "bfloat16", "choices": ["float32", "bfloat16"]},
}


def parser(doc: str, **flags) -> argparse.ArgumentParser:
    """An ArgumentParser described by `doc`'s first line, with the shared `flags` in the order
    given: each name=default, or name=dict of argparse settings (default, help, choices...;
    {} keeps the shared ones)."""
    p = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    add_flags(p, **flags)
    return p


def add_flags(p: argparse.ArgumentParser, **flags) -> None:
    """The shared `flags` (as `parser` takes them) added to `p`, after the script's own."""
    for name, value in flags.items():
        if name not in FLAGS:
            raise KeyError(f"benchkit: no shared flag {name!r} (known: {', '.join(FLAGS)})")
        names, settings = FLAGS[name]
        given = value if isinstance(value, dict) else {"default": value}
        p.add_argument(*names, **{**settings, **given})


def decode_settings(args, num_prompts: int) -> dict:
    """What a decoding comparison ran (COMPARE_FLAGS and the decoding flags), for its JSON."""
    return {
        "target": args.target,
        "dtype": args.dtype,
        "k": args.num_speculative_tokens,
        "prompts": args.prompts,
        "num_prompts": num_prompts,
        "max_new_tokens": args.max_new_tokens,
    }


def save(result: dict, path, *, stamp: bool = True, quiet: bool = False, argv: list[str] | None = None):
    """Write `result` to `path` atomically (nothing when `path` is None), stamped with machine,
    commit, date and command unless `stamp` is False; say "wrote PATH" unless `quiet`. The
    result as written, or None."""
    if not path:
        return None
    from draftsmith.evaluation.report import write_json_atomic, write_report

    written = write_report(result, path, argv) if stamp else write_json_atomic(result, path)
    if not quiet:
        print(f"wrote {path}")
    return written


def markdown_table(head: list[str], rows) -> str:
    """A Markdown table: `head`, its rule, one line per row of cells (None prints as "-")."""
    lines = [_row(head), "|" + "---|" * len(head)]
    lines += [_row(["-" if c is None else str(c) for c in cells]) for cells in rows]
    return "\n".join(lines)


def _row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def machine_line(device=None) -> str:
    """The hardware in one line: the CPU's model and flags, or the GPU's name."""
    import torch

    from draftsmith.infer.hardware import cpu_info, format_cpu

    device = torch.device(device or "cpu")
    return format_cpu(cpu_info()) if device.type == "cpu" else torch.cuda.get_device_name(device)


def operator_times(prof) -> tuple[list, float]:
    """A torch.profiler run's operators with self CPU time, the most expensive first, and their
    total (microseconds)."""
    events = sorted((e for e in prof.key_averages() if e.self_cpu_time_total > 0), key=lambda e: -e.self_cpu_time_total)
    return events, sum(e.self_cpu_time_total for e in events)


def capped_k(drafter, k: int) -> int:
    """`k`, or fewer where the drafter proposes at most that many tokens a step (DFlash's block)."""
    from draftsmith.infer.proposal import speculative_cap

    cap = speculative_cap(drafter)
    return k if cap is None else min(k, cap)


def comparison(outputs: dict[str, list], baseline: str = "plain") -> dict[str, dict]:
    """Per method of an interleaved run (draftsmith.evaluation.bench.interleaved: name -> results): its
    mean per-prompt tokens/s, its acceptance pooled over the prompts (SpecMetrics), and whether
    every output equals the baseline's token for token."""
    from draftsmith.evaluation.bench import _mean_tps
    from draftsmith.infer.metrics import SpecMetrics

    out = {}
    for name, results in outputs.items():
        metrics = SpecMetrics()
        for r in results:
            metrics = metrics.merge(r.metrics)
        out[name] = {
            "tokens_per_s": _mean_tps([(len(r.tokens), r.elapsed_s) for r in results]),
            "metrics": metrics,
            "outputs_match": all(a.tokens == b.tokens for a, b in zip(results, outputs[baseline])),
        }
    return out


def run_main(main, *args) -> None:
    """A script's entry: exit with main's status; a DraftsmithError is one line and status 2."""
    from draftsmith.errors import run_command

    sys.exit(run_command(main, *args))


__all__ = [
    "COMPARE_FLAGS",
    "FLAGS",
    "add_flags",
    "capped_k",
    "comparison",
    "decode_settings",
    "machine_line",
    "markdown_table",
    "operator_times",
    "parser",
    "run_main",
    "save",
]
