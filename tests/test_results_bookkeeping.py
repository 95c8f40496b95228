"""The results page and the README quote only what a stamped JSON under results/ records.

Every `results/....json` that docs/results.md or README.md cites must exist and carry a complete
stamp (the machine, the date, the commit and the command: what draftsmith/evaluation/report.py's
`stamp()` writes); every markdown table with a figure in docs/results.md must be followed, within
its section, by the path of such a file; the headline figures (QUOTED below) must be the numbers
their JSON holds, rounded as the page shows them; and neither page uses work-log words. Pure
Python: the files are read as text and JSON, nothing is run.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = ("docs/results.md", "README.md")

CITED = re.compile(r"(?<![\w/.-])(results/[\w./-]+?\.json)\b")
HEADING = re.compile(r"^#{1,6} ")
SEPARATOR = re.compile(r"^\|\s*:?-{3,}")
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?!\w)")  # a figure, not the digit of a name (eagle3)
WORK_LOG = re.compile(r"\bso far\b|\byet\b|later the same day|working tree|\bas above\b|\bnow\b", re.I)

# The stamp's four parts, by the keys that stamped files use: report.py's stamp() writes machine,
# commit, date and command; bench reports also carry the CPU as `cpu` and `hardware`.
STAMP = {
    "machine": ("machine", "cpu", "hardware"),
    "date": ("date",),
    "commit": ("commit",),
    "command": ("command",),
}


def cited_paths(text: str) -> list[str]:
    return sorted(set(CITED.findall(text)))


def stamp_problems(path: pathlib.Path) -> list[str]:
    """What is wrong with one cited JSON file: missing, unreadable, or a stamp part absent/empty."""
    if not path.is_file():
        return ["missing"]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return [f"not JSON ({e})"]
    if not isinstance(data, dict):
        return ["not a JSON object"]
    # serve-bench keeps its stamp in one block: {"stamp": {"machine", "date", "git_commit", "command"}}
    nested = data.get("stamp") if isinstance(data.get("stamp"), dict) else {}
    nested = {**nested, "commit": nested.get("commit") or nested.get("git_commit")}
    return [f"no {part}" for part, keys in STAMP.items() if not any(data.get(k) or nested.get(k) for k in keys)]


def page_citation_problems(text: str, root: pathlib.Path) -> dict[str, list[str]]:
    problems = {p: stamp_problems(root / p) for p in cited_paths(text)}
    return {p: found for p, found in problems.items() if found}


def tables(text: str) -> list[tuple[int, int]]:
    """(first line, last line) of each markdown table: a header row, a |---| row, body rows."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines) - 1:
        if lines[i].lstrip().startswith("|") and SEPARATOR.match(lines[i + 1].lstrip()):
            end = i + 1
            while end + 1 < len(lines) and lines[end + 1].lstrip().startswith("|"):
                end += 1
            out.append((i, end))
            i = end + 1
        else:
            i += 1
    return out


def uncited_tables(text: str) -> list[str]:
    """The header rows of the tables that hold a number in their body but are not followed by a
    `results/....json` path before the next heading."""
    lines, out = text.splitlines(), []
    for first, last in tables(text):
        body = "\n".join(lines[first + 2 : last + 1])
        if not NUMBER.search(body):
            continue
        rest = []
        for line in lines[last + 1 :]:
            if HEADING.match(line):
                break
            rest.append(line)
        if not CITED.search("\n".join(rest)):
            out.append(lines[first].strip())
    return out


# --- quoted figures against their JSON ---------------------------------------------------------
#
# Each entry: a page, a phrase of it in which every `{}` is a quoted figure (whitespace in the
# phrase matches any run of whitespace, line breaks included), the JSON it comes from, and one
# function per `{}` reading that figure from the JSON. A float is compared as the page rounds it
# (3.74 against 3.7404 passes, 3.78 fails), a bool as `true`/`false`, anything else as text.


def _dtype(name):
    return {"float32": "fp32", "bfloat16": "bf16"}.get(name, name)


SERVED = "results/serve-bench/qwen-coder-draft-lm-code/results.json"
SHIPPED_CC = "results/crosscheck/qwen-coder-draft-lm-vocab.json"
EARLIER_CC = "results/crosscheck/qwen-coder-draft-lm-distilled.json"
KINDS = "results/qwen-kinds/results.json"
VOCAB = "results/qwen-kinds-vocab/results.json"
RACE = "results/peer-race/race.json"
STEPS = "results/cpu-matmul/qwen-coder-steps.json"
ONEDNN = "results/qwen-coder/onednn.json"
PAIR = "results/qwen-coder/results.json"
SMOL_SERVED = "results/serve-bench/smollm2-eagle3-long90-fp32/results.json"
SMOL_CC = "results/crosscheck/smollm2-eagle3-quickstart.json"
IN_DOMAIN = "results/qwen-code-distilled/results.json"
PACKING = "results/train-before-after/smollm2-eagle3-packing.json"
LONG30 = "results/peer-race/long30/long.json"
LONG90 = "results/peer-race/long90/long.json"
SMOL_CC_T1 = "results/crosscheck/smollm2-eagle3-long90-t1.json"
QWEN_CC_T1 = "results/crosscheck/qwen-coder-draft-lm-code-t1.json"
DRIVER_CHECK = "results/serve-bench/driver-check/{}/results.json"
CAPACITY = "results/capacity/smollm2-135m-instruct-{}.json"
ALL_KINDS_TRAIN = "results/train-precision/smollm2-all-kinds.json"
PLAIN_EPYC = "results/plain-vs-vllm/epyc.json"
PLAIN_FUSED = "results/plain-vs-vllm/epyc-fused.json"
PLAIN_AGAIN = "results/plain-vs-vllm/epyc-{}.json"  # smollm2-idle, qwen-fp32-documented, prefill-qwen
QWEN_BENCH = "results/bench/qwen-coder-draft-lm-code-fused{}.json"  # "": the draft on transformers' forward
STEPS_BF16 = "results/cpu-matmul/{}-steps-bf16-fused.json"


def _long(j, trainer, point, key="tau"):
    return j["results"]["draftsmith" if trainer == "ours" else "speculators 0.9.0"][point][key]


def _long_taus(trainer):
    """A trainer's τ ± standard error at the race's midpoint and end, as its table row gives them."""
    return [lambda j, p=p, k=k: _long(j, trainer, p, k) for p in ("at", "final") for k in ("tau", "tau_se")]


def _long_paired_at(point):
    return [lambda j: _long_paired(j, point), lambda j: _long_paired(j, point, "se")]


def _long_paired(j, point, key="ours_minus_peer"):
    return j[f"difference_{point}"]["paired"][key]


def _tau(j, method):
    return j["methods"][method]["mean_acceptance_length"]


def _speed(j, method):
    return j["methods"][method]["speedup"]


def _cc(j, runtime, key):
    """A crosscheck runtime's figure: runtime "ours" or "vllm"."""
    return j["runtimes"][runtime][key]


def _sampled(j, side, key="mean_acceptance_length"):
    """A sampled crosscheck's τ block: side "ours", "engine" or "ours_lossless"."""
    return j["tau"][side][key]


_SAMPLED_GETTERS = [
    lambda j, s=s, k=k: _sampled(j, s, k)
    for s in ("ours", "engine", "ours_lossless")
    for k in ("mean_acceptance_length", "standard_error", "drafts")
]


def _position(j, position, side):
    return j["positions"][position - 1][side]


def _agreement(j, key):
    return j["runtimes"]["vllm"]["agreement"][key]


def _race(j, trainer, key):
    return j["results"]["draftsmith" if trainer == "ours" else "speculators 0.9.0"][key]


def _race_ratio(j):
    return _race(j, "ours", "tokens_per_s") / _race(j, "peer", "tokens_per_s")


def _served(j, temperature, concurrency, what):
    """serve-bench's pooled row ("all"): its τ or its output tokens/s speedup; concurrency None: all loads."""
    rows = [r for r in j["rows"] if r["category"] == "all" and r["temperature"] == temperature]
    rows = [r for r in rows if concurrency in (None, r["concurrency"])]
    values = [r["drafted"]["spec"]["tau"] if what == "tau" else r["speedup"]["output_tokens_per_s"] for r in rows]
    return values if concurrency is None else values[0]


def _train_precision(recipe):
    """A recipe's row of the one-run bench_train table: train tokens/s before and auto, their
    ratio, and the target's forward tokens/s before and auto."""

    def mode(j, name, key):
        (row,) = [c for c in j["comparison"] if c["recipe"].endswith(f"/{recipe}.yaml")]
        return row["modes"][name][key]

    return [lambda j: mode(j, "before", "train_tokens_per_s"), lambda j: mode(j, "auto", "train_tokens_per_s"),
            lambda j: mode(j, "auto", "over_first"), lambda j: mode(j, "before", "target_forward_tokens_per_s"),
            lambda j: mode(j, "auto", "target_forward_tokens_per_s")]  # fmt: skip


def _plain_row(model, dtype, variant):
    """A row of the plain-vs-vLLM table: ours on the chosen kernel, ours on F.linear and vLLM
    (decode ms/token), the ratio, our prefill and vLLM's (ms)."""

    def row(j):
        (r,) = [r for r in j["rows"] if (r["model"], r["dtype"], r["variant"]) == (model, dtype, variant)]
        return r

    return [lambda j: row(j)["ours"]["decode_ms_per_token"], lambda j: row(j)["ours:linear"]["decode_ms_per_token"],
            lambda j: row(j)["vllm"]["decode_ms_per_token"], lambda j: row(j)["ratio"],
            lambda j: round(row(j)["ours"]["prefill_ms"]), lambda j: round(row(j)["vllm"]["prefill_ms"])]  # fmt: skip


AVX2_PLAIN = "results/plain-vs-vllm/avx2-{}.json"
AVX2_QUICK_CC = "results/crosscheck/avx2-smollm2-quickstart-k3{}.json"
AVX2_QUICK_BENCH = "results/bench/avx2-smollm2-quickstart-k3.json"
AVX2_ADAPTIVE = "results/adaptive-k/avx2-smollm2-{}.json"
AVX2_QUICK_ONE_CORE = "results/bench/avx2-smollm2-quickstart-k3-one-core.json"
AVX2_QUICK_SERVED = "results/serve-bench/avx2-smollm2-quickstart-k3/results.json"
QWEN_AVX2 = "results/qwen-kinds-avx2{}/results.json"  # "": the sweep; "-untried": with the untimed-K try


def _qk(method: str, key: str, run: str = ""):
    """A getter of one method's figure in the Qwen pair's AVX2 runs (key "steps": all its steps)."""

    def get(j):
        m = _json(QWEN_AVX2.format(run))["methods"][method]
        return sum(m["adaptive_k"]["k_counts"].values()) if key == "steps" else m[key]

    return get


def _served_all(j) -> dict:
    """serve-bench's pooled row ("all") of a one-level, one-temperature run."""
    (row,) = [r for r in j["rows"] if r["category"] == "all"]
    return row


def _predicted_split() -> list:
    """A bench's speedup predicted from its step costs alone, its verify in plain steps, and its
    drafting's share of a plain step."""
    costs = lambda j: j["step_costs_s"]  # noqa: E731
    return [lambda j: j["predicted_speedup"], lambda j: costs(j)["t_verify"] / costs(j)["t_step"],
            lambda j: costs(j)["t_draft_k"] / costs(j)["t_step"]]  # fmt: skip


def _adaptive_row(tree: bool) -> list:
    """A row of the AVX2 adaptive-K table: the fixed run's τ, its error and speedup, adaptive K's
    speedup, its drafted steps of all its steps (written 1,976: thousands, then the rest), and for
    a tree drafter its chains of one token and its trees."""
    counts = lambda j: j["adaptive_k"]["k_counts"]  # noqa: E731
    total = lambda j: sum(counts(j).values())  # noqa: E731
    return [lambda j: j["fixed_k"][TAU], lambda j: j["fixed_k"][TAU + "_se"], lambda j: j["fixed_k"]["speedup"],
            lambda j: j["speedup"], lambda j: total(j) - counts(j)["0"],
            lambda j: total(j) // 1000, lambda j: f"{total(j) % 1000:03d}"] + (
        [lambda j: counts(j)["1"], lambda j: counts(j)["tree"]] if tree else [])  # fmt: skip


def _profile_split() -> list:
    """Getters of a plain-vs-vLLM profile as the pages quote it: ms a step, then the layers'
    products, then the LM head, each ours then vLLM's."""
    steps = [lambda j, s=s: j["profiles"][0][s]["ms_per_step"] for s in ("ours", "vllm")]
    return steps + [lambda j, s=s, g=g: j["profiles"][0][s]["groups_ms_per_step"][g]
                    for g in ("linear/matmul", "lm_head") for s in ("ours", "vllm")]  # fmt: skip


def _verify_steps(j) -> float:
    """A bench's verify forward in plain steps, as timed inside its loop (drafting every step)."""
    costs = j["fixed_k"]["step_costs_in_loop_s"]
    return costs["t_verify"] / costs["t_step"]


def _again_row(dtype: str, variant: str) -> list:
    """Getters of a row of the measured-again table: decode ms ours, vLLM, ratio, prefill ms ours,
    vLLM, the idle vLLM's cores while ours ran."""

    def row(j):
        (r,) = [r for r in j["rows"] if r["dtype"] == dtype and r["variant"] == variant]
        return r

    return [lambda j: row(j)["ours"]["decode_ms_per_token"], lambda j: row(j)["vllm"]["decode_ms_per_token"],
            lambda j: row(j)["ratio"], lambda j: row(j)["ours"]["prefill_ms"], lambda j: row(j)["vllm"]["prefill_ms"],
            lambda j: row(j)["ours"]["vllm_idle_cores"]]  # fmt: skip


def _json(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def _qwen_fused_cc() -> dict:
    return _json("results/crosscheck/qwen-coder-draft-lm-code-fused.json")


def _fused_row(model, dtype, variant):
    """A row of the fused-forward table: ours (fused), ours on transformers' forward, vLLM (decode
    ms/token), ours/vLLM and transformers' forward/vLLM (tokens/s), our prefill and vLLM's (ms)."""

    def row(j):
        (r,) = [r for r in j["rows"] if (r["model"], r["dtype"], r["variant"]) == (model, dtype, variant)]
        return r

    def ms(j, side):
        return row(j)[side]["decode_ms_per_token"]

    return [lambda j: ms(j, "ours"), lambda j: ms(j, "ours:transformers"), lambda j: ms(j, "vllm"),
            lambda j: row(j)["ratio"], lambda j: ms(j, "vllm") / ms(j, "ours:transformers"),
            lambda j: round(row(j)["ours"]["prefill_ms"]), lambda j: round(row(j)["vllm"]["prefill_ms"])]  # fmt: skip


FUSED_ROWS = [  # (model, dtype, variant) measured in the fused-forward run
    ("smollm2-135m-instruct", "float32", "documented"),
    ("smollm2-135m-instruct", "float32", "crosscheck"),
    ("smollm2-135m-instruct", "bfloat16", "documented"),
    ("smollm2-135m-instruct", "bfloat16", "crosscheck"),
    ("qwen2.5-coder-1.5b-instruct", "float32", "crosscheck"),
    ("qwen2.5-coder-1.5b-instruct", "bfloat16", "documented"),
    ("qwen2.5-coder-1.5b-instruct", "bfloat16", "crosscheck"),
]


def _fused_rows():
    names = {"smollm2-135m-instruct": "SmolLM2-135M", "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder-1.5B"}
    short = {"float32": "fp32", "bfloat16": "bf16"}
    return [(RESULTS, f"| {names[m]}, {short[d]} | {v} |" + " {} |" * 7, PLAIN_FUSED, _fused_row(m, d, v))
            for m, d, v in FUSED_ROWS]  # fmt: skip


def _plain_rows():
    names = {"smollm2-135m-instruct": "SmolLM2-135M", "qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder-1.5B"}
    out = []
    for model, name in names.items():
        for dtype, short in (("float32", "fp32"), ("bfloat16", "bf16")):
            for variant in ("documented", "crosscheck"):
                phrase = f"| {name} | {short} | {variant} |" + " {} |" * 6
                out.append((RESULTS, phrase, PLAIN_EPYC, _plain_row(model, dtype, variant)))
    return out


def _verify_cost(kernel):
    return [lambda j: j["kernels"][kernel]["t_step_ms"], lambda j: j["kernels"][kernel]["t_verify_ms"],
            lambda j: j["kernels"][kernel]["verify_over_step"]]  # fmt: skip


CAPACITY_ROWS = [  # (the page's name, its recipe cell, the JSON's file suffix, the kind)
    ("EAGLE-3", "eagle3.yaml", "eagle3", "eagle3"),
    ("DFlash", "dflash.yaml", "dflash", "dflash"),
    ("EAGLE-1", "eagle.yaml", "eagle", "eagle"),
    (
        "draft LM, total variation (the recipe until this check)",
        "draft_lm.yaml`, `drafter.divergence=tvd",
        "draft_lm",
        "draft_lm",
    ),
    ("draft LM, forward KL (the recipe)", "draft_lm.yaml", "draft_lm-fkl", "draft_lm"),
    ("Medusa-1", "medusa.yaml", "medusa", "medusa"),
    ("PARD", "pard.yaml", "pard", "pard"),
]


def _capacity(kind):
    """A capacity row: K, τ, the bar, τ per prompt (4), acceptance per position (4), outputs equal."""

    def r(j):
        return j["kinds"][kind]

    return [lambda j: r(j)["num_speculative_tokens"], lambda j: r(j)["mean_acceptance_length"], lambda j: r(j)["bar"],
            *[lambda j, i=i: r(j)["per_prompt"][i] for i in range(4)],
            *[lambda j, i=i: r(j)["per_position_acceptance"][i] for i in range(4)],
            lambda j: "yes" if r(j)["outputs_match_target"] else "no"]  # fmt: skip


def _served_range(temperature, what):
    return [lambda j: min(_served(j, temperature, None, what)), lambda j: max(_served(j, temperature, None, what))]


def _taus(*methods):
    return [lambda j, m=m: _tau(j, m) for m in methods]


def _speeds(*methods):
    return [lambda j, m=m: _speed(j, m) for m in methods]


def _ccs(*pairs):
    return [lambda j, r=r, k=k: _cc(j, r, k) for r, k in pairs]


TAU = "mean_acceptance_length"
LONG_TREE = "results/long-run/smollm2-eagle3-90min-tree.json"
LONG_TRUNC = "results/long-run/smollm2-truncated1.json"
LONG_ONE = "results/long-run/smollm2-eagle3-one-step.json"
README, RESULTS = "README.md", "docs/results.md"

QUOTED = [
    # our EAGLE-3 trainer against speculators at equal wall-clock, 15 and 30 minutes, paired over the prompts
    (README, "(48 prompts): paired difference +{} ± {} / +{} ± {}, AVX-512 + AVX512-BF16 | {} vs {} / {} vs {} |",
     LONG90, [lambda j: _long_paired(j, "at"), lambda j: _long_paired(j, "at", "se"),
              lambda j: _long_paired(j, "final"), lambda j: _long_paired(j, "final", "se"),
              lambda j: _long(j, "ours", "at"), lambda j: _long(j, "peer", "at"),
              lambda j: _long(j, "ours", "final"), lambda j: _long(j, "peer", "final")]),
    (RESULTS, "| draftsmith | 332 | 679,936 | {} ± {} | 465 | 952,320 | {} ± {} |", LONG90, _long_taus("ours")),
    (RESULTS, "| speculators 0.9.0 | 203 | 384,274 | {} ± {} | 306 | 578,384 | {} ± {} |", LONG90, _long_taus("peer")),
    (RESULTS, "paired over the 48 prompts: +{} ± {} at 60 minutes", LONG90, _long_paired_at("at")),
    (RESULTS, "+{} ± {} at 90 minutes (", LONG90, _long_paired_at("final")),
    (RESULTS, "| draftsmith | 90 | 184,320 | {} ± {} | 170 | 348,160 | {} ± {} |", LONG30, _long_taus("ours")),
    (RESULTS, "| speculators 0.9.0 | 49 | 91,786 | {} ± {} | 102 | 190,971 | {} ± {} |", LONG30, _long_taus("peer")),
    (RESULTS, "paired over the 48 prompts: +{} ± {} at 15 minutes", LONG30, _long_paired_at("at")),
    (RESULTS, "+{} ± {} at 30 minutes (beyond", LONG30, _long_paired_at("final")),
    # packing before/after at equal steps, paired over the same prompts
    (README, "paired difference +{} ± {}, no difference, AVX-512 + AVX512-BF16 | {} vs {} |", PACKING,
     [lambda j: j["after_minus_before"]["mean_acceptance_length"], lambda j: j["after_minus_before"]["se"],
      lambda j: j["sides"]["after"][TAU], lambda j: j["sides"]["before"][TAU]]),
    (RESULTS, "| each conversation on its own | 887ff27 | {} ± {} |", PACKING,
     [lambda j: j["sides"]["after"][TAU], lambda j: j["sides"]["after"]["mean_acceptance_length_se"]]),
    (RESULTS, "| conversations run together | 31b1fa1 | {} ± {} |", PACKING,
     [lambda j: j["sides"]["before"][TAU], lambda j: j["sides"]["before"]["mean_acceptance_length_se"]]),
    # the 0.5B distilled in-domain against its untrained start, paired over the same problems
    (README, "paired difference −{} ± {}, no difference, same machine | {} vs {} | {}× / {}× |", IN_DOMAIN,
     [lambda j: -j["paired"][0]["difference"], lambda j: j["paired"][0]["se"], *_taus("draft_lm K=6", "qwen0.5b K=6"),
      *_speeds("draft_lm K=6", "qwen0.5b K=6")]),
    (RESULTS, "| 0.5B untrained, K=6 | {} ± {} | {} | {} | {}× |", IN_DOMAIN,
     [lambda j: _tau(j, "qwen0.5b K=6"), lambda j: j["methods"]["qwen0.5b K=6"]["mean_acceptance_length_se"],
      lambda j: j["methods"]["qwen0.5b K=6"]["per_position_acceptance"][0],
      lambda j: j["methods"]["qwen0.5b K=6"]["tokens_per_s"], lambda j: _speed(j, "qwen0.5b K=6")]),
    (RESULTS, "| 0.5B distilled in-domain, K=6 | {} ± {} | {} | {} | {}× |", IN_DOMAIN,
     [lambda j: _tau(j, "draft_lm K=6"), lambda j: j["methods"]["draft_lm K=6"]["mean_acceptance_length_se"],
      lambda j: j["methods"]["draft_lm K=6"]["per_position_acceptance"][0],
      lambda j: j["methods"]["draft_lm K=6"]["tokens_per_s"], lambda j: _speed(j, "draft_lm K=6")]),
    # README: the front page's claims
    (README, "τ {} in vLLM against {} in our runtime", SHIPPED_CC, _ccs(("vllm", TAU), ("ours", TAU))),
    (README, "without its draft vocabulary (τ {} against {})", EARLIER_CC, _ccs(("vllm", TAU), ("ours", TAU))),
    (README, 'has the verdict "disagrees" (`agrees: {}`)', EARLIER_CC, [lambda j: _agreement(j, "agrees")]),
    (README, "1.5B {}× faster at one request and {}× at eight, greedy (τ {}), and {}× and {}× at temperature 1 (τ {})",
     SERVED, [lambda j: _served(j, 0.0, 1, "speedup"), lambda j: _served(j, 0.0, 8, "speedup"),
              lambda j: _served(j, 0.0, 1, "tau"), lambda j: _served(j, 1.0, 1, "speedup"),
              lambda j: _served(j, 1.0, 8, "speedup"), lambda j: _served(j, 1.0, 1, "tau")]),
    (README, "decodes {}× faster than the best plain decoding, {}× on held-out HumanEval", VOCAB,
     [*_speeds("draft_lm K=6"), lambda j: j["methods"]["draft_lm K=6"]["by_domain"]["humaneval"]["speedup"]]),
    (README, "the untrained 0.5B reached {}× in the same run ({}× with adaptive K)", VOCAB,
     _speeds("qwen0.5b K=6", "qwen0.5b adaptive")),
    (README, "added 4% ({}× against {}× for the same weights over the whole vocabulary)", VOCAB,
     _speeds("draft_lm K=6", "draft_lm whole vocab K=6")),
    (README, "near plain speed ({}× with a useless draft)", KINDS, _speeds("truncated:1 adaptive")),
    # README: the results table, row by row
    (README, "| | {}× | [qwen-coder-steps.json](results/cpu-matmul/qwen-coder-steps.json) |", STEPS,
     [lambda j: 1 / j["kernels"]["onednn"]["step_over_linear_step"]]),
    (README, "| {} | {}× | [onednn.json](results/qwen-coder/onednn.json) |", ONEDNN,
     [lambda j: j[TAU], lambda j: j["speedup"]]),
    (README, "| {} vs {} | | [results.json](results/qwen-coder/results.json) |", PAIR,
     _taus("ours (distilled)", "ours (untrained)")),
    (README, "AVX512-BF16 | {} | {}× | [results.json](results/qwen-kinds/results.json) |", KINDS,
     _taus("qwen0.5b K=6") + _speeds("qwen0.5b K=6")),
    (README, "| {} / {} | {}× / {}× | [results.json](results/qwen-kinds/results.json) |", KINDS,
     _taus("draft_lm K=4", "eagle3 K=4") + _speeds("draft_lm K=4", "eagle3 K=4")),
    (README, "| | {}× / {}× / {}× | [results.json](results/qwen-kinds/results.json) |", KINDS,
     _speeds("truncated:1 adaptive", "eagle3 adaptive", "qwen0.5b adaptive")),
    (README, "| {} / {} | {}× / {}× | [results.json](results/qwen-kinds-vocab/results.json) |", VOCAB,
     _taus("draft_lm K=6", "qwen0.5b K=6") + _speeds("draft_lm K=6", "qwen0.5b K=6")),
    (README, "greedy, same machine | {} | {}× / {}× | [results.json](" + SERVED + ") |", SERVED,
     [lambda j: _served(j, 0.0, 1, "tau"), lambda j: _served(j, 0.0, 1, "speedup"),
      lambda j: _served(j, 0.0, 8, "speedup")]),
    (README, "sampler) | {} | {}× / {}× | [results.json](" + SERVED + ") |", SERVED,
     [lambda j: _served(j, 1.0, 1, "tau"), lambda j: _served(j, 1.0, 1, "speedup"),
      lambda j: _served(j, 1.0, 8, "speedup")]),
    (README, "| {} vs {} | {}× the training tokens/s ({} vs {}) |", RACE,
     [lambda j: _race(j, "ours", "tau_equal_time"), lambda j: _race(j, "peer", "tau_equal_time"), _race_ratio,
      lambda j: _race(j, "ours", "tokens_per_s"), lambda j: _race(j, "peer", "tokens_per_s")]),
    (README, "| {} / {} | {}× / {}× | [smollm2-eagle3-90min-tree.json](" + LONG_TREE + ") |", LONG_TREE,
     [lambda j: j[TAU], lambda j: j["fixed_k"][TAU], lambda j: j["speedup"], lambda j: j["fixed_k"]["speedup"]]),
    # docs/results.md: the summary rows and the corrected passages
    (RESULTS, "over the best plain decoding, target {}, draft {} | {} | {}× |", KINDS,
     [lambda j: _dtype(j["methods"]["qwen0.5b K=6"]["dtype"]),
      lambda j: _dtype(j["methods"]["qwen0.5b K=6"]["cpu_matmul"]["draft_dtype"]["dtype"]),
      *_taus("qwen0.5b K=6"), *_speeds("qwen0.5b K=6")]),
    (RESULTS, "1 / 2 / 4 / 8 requests in flight | {} | {}× / {}× / {}× / {}× |", SERVED,
     [lambda j: _served(j, 0.0, 1, "tau")] + [lambda j, c=c: _served(j, 0.0, c, "speedup") for c in (1, 2, 4, 8)]),
    (RESULTS, "| the same sweep at T=1 | {}-{} | {}× / {}× / {}× / {}× |", SERVED,
     _served_range(1.0, "tau") + [lambda j, c=c: _served(j, 1.0, c, "speedup") for c in (1, 2, 4, 8)]),
    (RESULTS, "T=0 / T=1, 1 / 8 requests in flight | {} / {} | {}× / {}× (T=0), {}× / {}× (T=1) |", SMOL_SERVED,
     [lambda j: _served(j, 0.0, 1, "tau"), lambda j: _served(j, 1.0, 1, "tau"),
      lambda j: _served(j, 0.0, 1, "speedup"), lambda j: _served(j, 0.0, 8, "speedup"),
      lambda j: _served(j, 1.0, 1, "speedup"), lambda j: _served(j, 1.0, 8, "speedup")]),
    (RESULTS, "pays at one and two requests in flight ({}×, {}×) and loses from four on ({}×, {}× at eight)", SERVED,
     [lambda j, c=c: _served(j, 0.0, c, "speedup") for c in (1, 2, 4, 8)]),
    (RESULTS, "keeps most of its acceptance: τ {}-{}", SERVED, _served_range(1.0, "tau")),
    (RESULTS, "At τ {} the EAGLE-3 head does not pay in vLLM-CPU at one request ({}×", SMOL_SERVED,
     [lambda j: _served(j, 0.0, 1, "tau"), lambda j: _served(j, 0.0, 1, "speedup")]),
    (RESULTS, "within crosscheck's bf16 criterion | {} / {} | {}× / {}× |", SHIPPED_CC,
     _ccs(("ours", TAU), ("vllm", TAU), ("ours", "speedup"), ("vllm", "speedup"))),
    (RESULTS, "| vLLM | {} | {} | {}× | {}/12 | {}/12 | agrees (bf16 criterion) |", SHIPPED_CC,
     _ccs(("vllm", TAU), ("vllm", "tokens_per_s"), ("vllm", "speedup"), ("vllm", "outputs_equal_plain"))
     + [lambda j: _agreement(j, "counts_equal_ours")]),
    (RESULTS, "| vLLM | {} | {} | {}× | {}/12 | {}/12 | disagrees", EARLIER_CC,
     _ccs(("vllm", TAU), ("vllm", "tokens_per_s"), ("vllm", "speedup"), ("vllm", "outputs_equal_plain"))
     + [lambda j: _agreement(j, "counts_equal_ours")]),
    (RESULTS, "(`agrees: {}`, `exact_counts: {}`, every differing prompt explained), "
              "τ {} in vLLM against {} in ours", SHIPPED_CC,
     [lambda j: _agreement(j, "agrees"), lambda j: _agreement(j, "exact_counts"),
      *_ccs(("vllm", TAU), ("ours", TAU))]),
    (RESULTS, '"disagrees" (`agrees: {}`: {} of 12 prompts differ, none explained by that contract), '
              "τ {} against {}", EARLIER_CC,
     [lambda j: _agreement(j, "agrees"), lambda j: len(_agreement(j, "issues")),
      *_ccs(("vllm", TAU), ("ours", TAU))]),
    (RESULTS, "the untrained 0.5B reached {}× at K=6 ({}× with adaptive K) against the shipped draft's {}×",
     VOCAB, _speeds("qwen0.5b K=6", "qwen0.5b adaptive", "draft_lm K=6")),
    (RESULTS, "the tokens/s figures are its `tokens_per_s` ({} and {})", RACE,
     [lambda j: _race(j, "ours", "tokens_per_s"), lambda j: _race(j, "peer", "tokens_per_s")]),
    (RESULTS, "Ours trained {}× the tokens per second", RACE, [_race_ratio]),
    (RESULTS, "drafting the tree every step | {} / {} | {}× / {}× |", LONG_TREE,
     [lambda j: j[TAU], lambda j: j["fixed_k"][TAU], lambda j: j["speedup"], lambda j: j["fixed_k"]["speedup"]]),
    (RESULTS, "EAGLE-3 after one step (drafting every step: {}× / {}×) | | {}× / {}× |", LONG_TRUNC,
     [lambda j: j["fixed_k"]["speedup"], lambda j: json.loads((ROOT / LONG_ONE).read_text())["fixed_k"]["speedup"],
      lambda j: j["speedup"], lambda j: json.loads((ROOT / LONG_ONE).read_text())["speedup"]]),
    ("docs/engines.md", "Qwen2.5-Coder-1.5B τ {} against {} greedy", SERVED,
     [lambda j: _served(j, 1.0, 1, "tau"), lambda j: _served(j, 0.0, 1, "tau")]),
    ("docs/engines.md", "the SmolLM2 EAGLE-3 {} against {}", SMOL_SERVED,
     [lambda j: _served(j, 1.0, 1, "tau"), lambda j: _served(j, 0.0, 1, "tau")]),
    (RESULTS, "| SmolLM2 EAGLE-3, 90 minutes | {} ± {} ({}) | {} ± {} ({}) | {} ± {} ({}) | {} |", SMOL_CC_T1,
     [*_SAMPLED_GETTERS, lambda j: j["verdict"]]),
    (RESULTS, "| Qwen 0.5B distilled on code | {} ± {} ({}) | {} ± {} ({}) | {} ± {} ({}) | {} |", QWEN_CC_T1,
     [*_SAMPLED_GETTERS, lambda j: j["verdict"]]),
    (RESULTS, "(chat, code) | fp32 | 1 | {} | {} | {} | same |", SMOL_CC_T1,
     [lambda j: _position(j, 1, "ours"), lambda j: _position(j, 1, "engine"),
      lambda j: _position(j, 1, "detectable_difference")]),
    (RESULTS, "(code, HumanEval) | bf16 | 1 | {} | {} | {} | same |", QWEN_CC_T1,
     [lambda j: _position(j, 1, "ours"), lambda j: _position(j, 1, "engine"),
      lambda j: _position(j, 1, "detectable_difference")]),
    (README, "(SmolLM2 EAGLE-3 τ {} in vLLM against {} in ours; the Qwen draft LM {} against {}", SMOL_CC_T1,
     [lambda j: _sampled(j, "engine"), lambda j: _sampled(j, "ours"),
      lambda j: _sampled(json.loads((ROOT / QWEN_CC_T1).read_text()), "engine"),
      lambda j: _sampled(json.loads((ROOT / QWEN_CC_T1).read_text()), "ours")]),
    (RESULTS, "through `vllm bench serve`, gave {}× and {}×", DRIVER_CHECK.format("draftsmith"),
     [lambda j: _served(j, 0.0, 1, "speedup"),
      lambda j: _served(json.loads((ROOT / DRIVER_CHECK.format("vllm")).read_text()), 0.0, 1, "speedup")]),
    *[(RESULTS, f"| `{recipe}.yaml` | {kind} | {{}} | {{}} | {{}}× | {{}} | {{}} |", ALL_KINDS_TRAIN,
       _train_precision(recipe))
      for recipe, kind in (("eagle3", "EAGLE-3 | 2,048"), ("dflash", "DFlash | 2,048"),
                           ("draft_lm", "draft LM | 2,048"), ("eagle", "EAGLE-1 | 2,048"),
                           ("medusa", "Medusa-1 | 2,048"), ("medusa2", "Medusa-2 | 2,048"), ("pard", "PARD | 1,024"))],
    *[(page, "| {}× to {}× the training tokens/s |", ALL_KINDS_TRAIN,
       [lambda j: min(c["modes"]["auto"]["over_first"] for c in j["comparison"]),
        lambda j: max(c["modes"]["auto"]["over_first"] for c in j["comparison"])]) for page in (README, RESULTS)],
    *_plain_rows(),
    *_fused_rows(),
    *[(RESULTS, f"| {label} | {variant} | {{}} | {{}} | {{}} | {{}} | {{}} | {{}} |", PLAIN_AGAIN.format(file),
       _again_row(dtype, variant.split(",")[0]))
      for label, variant, file, dtype in (  # the table's rows; the summary row below quotes the ratios
          ("SmolLM2-135M, fp32, 5 repeats", "documented", "smollm2-idle", "float32"),
          ("SmolLM2-135M, fp32, 5 repeats", "crosscheck", "smollm2-idle", "float32"),
          ("SmolLM2-135M, bf16, 5 repeats", "documented", "smollm2-idle", "bfloat16"),
          ("SmolLM2-135M, bf16, 5 repeats", "crosscheck", "smollm2-idle", "bfloat16"),
          ("Qwen2.5-Coder-1.5B, fp32", "documented, 1 GiB KV", "qwen-fp32-documented", "float32"))],
    *[(RESULTS, f"| {forward} | {{}} ± {{}} ({{}}) | {{}} ms | {verify}{{}} ms | {{}}× |", QWEN_BENCH.format(suffix),
       [lambda j: j[TAU], lambda j: j[TAU + "_se"], lambda j: j["drafts"],
        lambda j: j["step_costs_s"]["t_draft_k"] * 1e3,
        *([lambda j: j["step_costs_s"]["t_verify"] * 1e3] if verify != "| " else []),
        lambda j: j["step_costs_s"]["t_step"] * 1e3, lambda j: j["speedup"]])
      for forward, suffix, verify in (("transformers'", "", "| "), ("fused", "-draft", "{} ms | "))],
    *[(page, phrase + " | {} / {} | {}× / {}× |", QWEN_BENCH.format("-draft"),
       [lambda j: j[TAU], lambda j: _qwen_fused_cc()["runtimes"]["vllm"][TAU], lambda j: j["speedup"],
        lambda j: _qwen_fused_cc()["runtimes"]["vllm"]["speedup"]])
      for page, phrase in ((README, "(target and draft on the fused forward) / vLLM-CPU, same machine"),)],
    (RESULTS, "(SmolLM2 bf16 with `split` as a candidate: {} / {}) | | {} / {}; {} / {}; {} / {} of vLLM's | "
     "AMD EPYC, AVX2",
     "results/plain-vs-vllm/avx2-qwen-fp32-shapes.json",
     [lambda j, v=v: _again_row("bfloat16", v)[2](_json(AVX2_PLAIN.format("smollm2-split")))
      for v in ("crosscheck", "documented")]
     + [_again_row("float32", "crosscheck")[2], _again_row("float32", "documented")[2]]
     + [lambda j, v=v: _again_row("bfloat16", v)[2](_json(AVX2_PLAIN.format("qwen-bf16-shapes")))
        for v in ("crosscheck", "documented")]
     + [lambda j, v=v: _again_row("float32", v)[2](_json(AVX2_PLAIN.format("smollm2-shapes")))
        for v in ("crosscheck", "documented")]),
    *[(RESULTS, f"| {label} | {variant_label} | {{}} | {{}} | {{}} | {{}} | {{}} |", AVX2_PLAIN.format(name),
       [_again_row(dtype, variant)[i] for i in (0, 1, 2, 3, 4)])
      for label, dtype, name in (
          ("SmolLM2-135M, fp32, `split` as a candidate", "float32", "smollm2-split"),
          ("SmolLM2-135M, bf16, `split` as a candidate", "bfloat16", "smollm2-split"),
          ("SmolLM2-135M, fp32, a kernel per shape", "float32", "smollm2-shapes"),
          ("Qwen2.5-Coder-1.5B, fp32, one row apart", "float32", "qwen-fp32-split"),
          ("Qwen2.5-Coder-1.5B, fp32, a kernel per shape", "float32", "qwen-fp32-shapes"),
          ("Qwen2.5-Coder-1.5B, bf16, a kernel per shape", "bfloat16", "qwen-bf16-shapes"))
      for variant, variant_label in (
          ("documented", "documented, 1 GiB KV" if name.startswith("qwen") else "documented"),
          ("crosscheck", "crosscheck"))],
    (RESULTS, "with the one-row choice apart it took {} ms a step against vLLM's {}",
     AVX2_PLAIN.format("qwen-fp32-split"),
     [lambda j, s=s: j["profiles"][0][s]["groups_ms_per_step"]["lm_head"] for s in ("ours", "vllm")]),
    (RESULTS, "SmolLM2 {} ms a step against vLLM's {}, of which the layers' products {} against {}, "
     "the head {} against {}",
     AVX2_PLAIN.format("smollm2-shapes"),
     _profile_split()),
    *[(RESULTS, f"| crosscheck, {side} | ours | {{}} | {{}} | {{}}× | {{}}/12 | | | | | vLLM | {{}} | {{}} | {{}}× | "
       "{}/12 | {}/12 | agrees (exact contract) |", AVX2_QUICK_CC.format(suffix),
       _ccs(("ours", TAU), ("ours", "tokens_per_s"), ("ours", "speedup"), ("ours", "outputs_equal_plain"),
            ("vllm", TAU), ("vllm", "tokens_per_s"), ("vllm", "speedup"), ("vllm", "outputs_equal_plain"))
       + [lambda j: j["runtimes"]["vllm"]["agreement"]["counts_equal_ours"]])
      for side, suffix in (("`F.linear`", ""), ("`--cpu-matmul auto`", "-auto"))],
    (RESULTS, "| `draftsmith bench` | ours | {} ± {} ({} drafts) | | {}× |", AVX2_QUICK_BENCH,
     [lambda j: j[TAU], lambda j: j[TAU + "_se"], lambda j: j["drafts"], lambda j: j["speedup"]]),
    (RESULTS, "our bench reads {}× and vLLM-CPU {}-{}× over its own plain", AVX2_QUICK_BENCH,
     [lambda j: j["speedup"]]
     + [lambda j, s=s: _cc(_json(AVX2_QUICK_CC.format(s)), "vllm", "speedup") for s in ("", "-auto")]),
    *[(page, phrase, "results/quickstart/avx2-10min.json",
       [_verify_steps,
        lambda j: j["fixed_k"]["speedup"], lambda j: j["speedup"]])
      for page, phrase in ((README, "a 17-token verify costs {} plain steps, at {}× and {}×"),
                           ("docs/getting-started.md", "a 17-token verify cost {} plain steps, and the draft decoded "
                            "at {}× plain speed drafting its tree every step and at {}× with adaptive K"))],
    (RESULTS, "τ {} ± {} ({} drafts) drafting the tree every step, {}× plain decoding, since a 17-token verify "
     "cost {} plain steps ({} against {} ms); the adaptive runtime drafted on {} of its {} steps and read {}×",
     "results/quickstart/avx2-10min.json",
     [lambda j: j["fixed_k"][TAU], lambda j: j["fixed_k"][TAU + "_se"], lambda j: j["fixed_k"]["drafts"],
      lambda j: j["fixed_k"]["speedup"],
      _verify_steps,
      lambda j: j["fixed_k"]["step_costs_in_loop_s"]["t_verify"] * 1e3,
      lambda j: j["fixed_k"]["step_costs_in_loop_s"]["t_step"] * 1e3,
      lambda j: j["adaptive_k"]["k_counts"]["1"], lambda j: sum(j["adaptive_k"]["k_counts"].values()),
      lambda j: j["speedup"]]),
    *[(RESULTS, f"| SmolLM2, {label} | K=4: {{}} ± {{}}, {{}}× | {{}}× | {{}} of {{}},{{}} | 8075615 |",
       AVX2_ADAPTIVE.format(name), _adaptive_row(False))
      for label, name in (("`truncated:1` (useless)", "truncated1"), ("EAGLE-3 after one step", "one-step"))],
    *[(RESULTS, f"| SmolLM2, quickstart EAGLE-3, tree; {label} | tree: {{}} ± {{}}, {{}}× | {{}}× | {{}} of {{}},{{}} "
       f"(chains of 1 {{}}, the tree {{}}) | {commit} |", AVX2_ADAPTIVE.format(name), _adaptive_row(True))
      for label, name, commit in (("a probe's hit restarts the back-off", "quickstart-tree", "8075615"),
                                  ("the tree's try after a hit decides the back-off", "quickstart-tree-backoff",
                                   "22416b2"))],
    (RESULTS, "so the runtime drafted {} times and read {}×. With the tree's try deciding the back-off (the hit "
     "still brings the tree back where no chain pays), it drafted {} times and read {}×",
     AVX2_ADAPTIVE.format("quickstart-tree"),
     [lambda j: j["drafts"], lambda j: j["speedup"]]
     + [lambda j, k=k: _json(AVX2_ADAPTIVE.format("quickstart-tree-backoff"))[k] for k in ("drafts", "speedup")]),
    (RESULTS, "The two runs' plain speeds differ by 7% ({} and {} tokens/s", AVX2_ADAPTIVE.format("quickstart-tree"),
     [lambda j, n=n: _json(AVX2_ADAPTIVE.format(n))["methods"]["plain"]["tokens_per_s"]
      for n in ("quickstart-tree", "quickstart-tree-backoff")]),
    (RESULTS, "(drafting every step: {}× / {}× / {}×) | | {}× / {}× / {}× | AMD EPYC, AVX2 only",
     AVX2_ADAPTIVE.format("truncated1"),
     [lambda j, n=n, f=f: f(_json(AVX2_ADAPTIVE.format(n)))
      for f in (lambda r: r["fixed_k"]["speedup"], lambda r: r["speedup"])
      for n in ("truncated1", "one-step", "quickstart-tree-backoff")]),
    (RESULTS, "vLLM's server (`serve-bench`, its model on one core) | {} / {} | {}× / {}× |", AVX2_QUICK_ONE_CORE,
     [lambda j: j[TAU], lambda j: _served_all(_json(AVX2_QUICK_SERVED))["drafted"]["spec"]["tau"],
      lambda j: j["speedup"], lambda j: _served_all(_json(AVX2_QUICK_SERVED))["speedup"]["output_tokens_per_s"]]),
    (RESULTS, "| `draftsmith bench` | 2 | {} ± {} ({}) | {}× | |", AVX2_QUICK_BENCH,
     [lambda j: j[TAU], lambda j: j[TAU + "_se"], lambda j: j["drafts"], lambda j: j["speedup"]]),
    (RESULTS, "| `draftsmith bench`, one core | 1 | {} ± {} ({}) | {}× | a step {} ms |", AVX2_QUICK_ONE_CORE,
     [lambda j: j[TAU], lambda j: j[TAU + "_se"], lambda j: j["drafts"], lambda j: j["speedup"],
      lambda j: j["step_costs_s"]["t_step"] * 1e3]),
    (RESULTS, "| vLLM's server (`serve-bench`) | 1 | {} ({}) | {}× (time per output token: {}×) | a token {} ms "
     "(median TPOT) |", AVX2_QUICK_SERVED,
     [lambda j: _served_all(j)["drafted"]["spec"]["tau"], lambda j: _served_all(j)["drafted"]["spec"]["drafts"],
      lambda j: _served_all(j)["speedup"]["output_tokens_per_s"], lambda j: _served_all(j)["speedup"]["median_tpot_ms"],
      lambda j: _served_all(j)["baseline"]["median_tpot_ms"]]),
    # the same phrase held to the server's counters and to each of our runs': the counts are equal
    *[(RESULTS, "vLLM's server counted the same {} drafts and {} accepted tokens as our runtime", path, getters)
      for path, getters in (
          (AVX2_QUICK_SERVED,
           [lambda j, k=k: _served_all(j)["drafted"]["spec"][k] for k in ("drafts", "accepted_tokens")]),
          (AVX2_QUICK_ONE_CORE, [lambda j: j["drafts"], lambda j: j["accepted_tokens"]]),
          (AVX2_QUICK_BENCH, [lambda j: j["drafts"], lambda j: j["accepted_tokens"]]))],
    (RESULTS, "our bench's speedup ({}×) is within 3% of the server's ({}×). On 2 cores it read {}×",
     AVX2_QUICK_ONE_CORE,
     [lambda j: j["speedup"], lambda j: _served_all(_json(AVX2_QUICK_SERVED))["speedup"]["output_tokens_per_s"],
      lambda j: _json(AVX2_QUICK_BENCH)["speedup"]]),
    *[(RESULTS, "The step costs of both bench runs predict {}× (a 4-token verify at {} plain steps on one core and "
       "on two, the drafting at {} of a step)", path, _predicted_split())
      for path in (AVX2_QUICK_ONE_CORE, AVX2_QUICK_BENCH)],
    (RESULTS, "Plain decoding in the same process: ours {} tokens/s against vLLM's {}", AVX2_QUICK_CC.format("-auto"),
     _ccs(("ours plain", "tokens_per_s"), ("vllm plain", "tokens_per_s"))),
    (RESULTS, "Profile of one step (crosscheck's layout): {} ms against vLLM's {}, of which the layers' "
     "products {} against {} and the head {} against {}",
     AVX2_PLAIN.format("qwen-bf16-shapes"),
     _profile_split()),
    (RESULTS, "The 1.5B: {} against {}, products {} against {}, head {} against {}.",
     AVX2_PLAIN.format("qwen-fp32-shapes"),
     _profile_split()),
    *[(RESULTS, f"| SmolLM2-135M, {label}, AVX2 | {variant} | {{}} | {{}} | {{}} | {{}} | {{}} | {{}} |",
       "results/plain-vs-vllm/avx2-smollm2-head.json",
       [*(_again_row(dtype, variant)[i] for i in (0, 1, 2)),
        lambda j, d=dtype, v=variant: _again_row(d, v)[2](_json("results/plain-vs-vllm/avx2-smollm2.json")),
        *(_again_row(dtype, variant)[i] for i in (3, 4))])
      for label, dtype in (("fp32", "float32"), ("bf16", "bfloat16")) for variant in ("documented", "crosscheck")],
    *[(RESULTS, f"| Qwen2.5-Coder-1.5B, fp32, AVX2 | {label} | {{}} | {{}} | {{}} | | {{}} | {{}} |",
       "results/plain-vs-vllm/avx2-qwen-fp32.json", [_again_row("float32", variant)[i] for i in (0, 1, 2, 3, 4)])
      for label, variant in (("crosscheck", "crosscheck"), ("documented, 1 GiB KV", "documented"))],
    *[(RESULTS, f"| Qwen2.5-Coder-1.5B, {label} | {{}} | {{}} | {{}} | {{}} | {{}} |",
       PLAIN_AGAIN.format("prefill-qwen"),
       [(lambda j, d=dtype, i=i: _again_row(d, "crosscheck")[i](j)) for i in (3, 4, 0, 1, 2)])
      for label, dtype in (("fp32, prefills on oneDNN", "float32"), ("bf16, prefills on `F.linear`", "bfloat16"))],
    (RESULTS, "1 GiB KV cache | | {} / {}, {} / {}; {} of vLLM's |", PLAIN_AGAIN.format("smollm2-idle"),
     [_again_row(d, v)[2] for v, d in (("documented", "float32"), ("documented", "bfloat16"),
                                       ("crosscheck", "float32"), ("crosscheck", "bfloat16"))]
     + [lambda j: _again_row("float32", "documented")[2](_json(PLAIN_AGAIN.format("qwen-fp32-documented")))]),
    (RESULTS, "τ {} (211 drafts) ours against {} (208) vLLM pooled over the 12 prompts, and each runtime's\n"
     "speedup over its own plain decoding reads {}× ours against {}× vLLM.",
     "results/crosscheck/qwen-coder-draft-lm-code-fused-draft.json",
     _ccs(("ours", TAU), ("vllm", TAU), ("ours", "speedup"), ("vllm", "speedup"))),
    (RESULTS, "(target and draft on the fused forward) / vLLM-CPU in crosscheck | {} / {} | {}× / {}× |",
     QWEN_BENCH.format("-draft"),
     [lambda j: j[TAU], lambda j: _qwen_fused_cc()["runtimes"]["vllm"][TAU], lambda j: j["speedup"],
      lambda j: _qwen_fused_cc()["runtimes"]["vllm"]["speedup"]]),
    (README, "(documented settings): ours at {} / {} of vLLM's tokens/s, {} / {} on transformers' forward, "
     "AVX-512 + AVX512-BF16 | | {}× / {}× |", PLAIN_FUSED,
     [_fused_row("smollm2-135m-instruct", d, "documented")[3] for d in ("bfloat16", "float32")]
     + [_fused_row("smollm2-135m-instruct", d, "documented")[4] for d in ("bfloat16", "float32")]
     + [lambda j, d=d: _fused_row("smollm2-135m-instruct", d, "documented")[1](j)
        / _fused_row("smollm2-135m-instruct", d, "documented")[0](j) for d in ("bfloat16", "float32")]),
    (RESULTS, "forward in the same run: {}, {} / {}) | | {}, {} / {} of vLLM's |", PLAIN_FUSED,
     [_fused_row(m, d, "documented")[i] for i in (4, 3)
      for m, d in (("qwen2.5-coder-1.5b-instruct", "bfloat16"), ("smollm2-135m-instruct", "float32"),
                   ("smollm2-135m-instruct", "bfloat16"))]),
    (RESULTS, "in plain steps: SmolLM2-135M / Qwen2.5-Coder-1.5B | | {} / {} |", STEPS_BF16.format("smollm2"),
     [lambda j: j["kernels"]["onednn"]["verify_over_step"],
      lambda j: _verify_cost("onednn")[2](json.loads((ROOT / STEPS_BF16.format("qwen-coder")).read_text()))]),
    (RESULTS, "| SmolLM2-135M | `F.linear` | {} | {} | {} |", STEPS_BF16.format("smollm2"), _verify_cost("linear")),
    (RESULTS, "| Qwen2.5-Coder-1.5B | `F.linear` | {} | {} | {} |", STEPS_BF16.format("qwen-coder"),
     _verify_cost("linear")),
    *[(RESULTS, f"| {name} | oneDNN (chosen) | {{}} | {{}} | {{}} |", STEPS_BF16.format(m), _verify_cost("onednn"))
      for name, m in (("SmolLM2-135M", "smollm2"), ("Qwen2.5-Coder-1.5B", "qwen-coder"))],
    *[(RESULTS, f"| {name} | `{recipe}` | {{}} | {{}} | {{}} | {{}} {{}} {{}} {{}} | {{}} {{}} {{}} {{}} | {{}} |",
       CAPACITY.format(file), _capacity(kind)) for name, recipe, file, kind in CAPACITY_ROWS],
    (RESULTS, "vLLM `eagle3`, K=4, {}, the built-in chat and code", SMOL_SERVED,
     [lambda j: _dtype(j["stamp"]["dtype"])]),
    (RESULTS, "| SmolLM2 quickstart EAGLE-3 | {} | ours | {} |", SMOL_CC,
     [lambda j: _dtype(j["dtype"]), *_ccs(("ours", TAU))]),
    # adaptive K on the Qwen pair on the AVX2 EPYC, before and with the try of an untimed K
    (RESULTS, "| Qwen 1.5B, the 0.5B untrained | fixed K = 2 / 3 / 4 / 6 | {} ± {} / {} ± {} / {} ± {} / {} ± {} | "
     "{}× / {}× / {}× / {}× | | c282b96 |", QWEN_AVX2.format(""),
     [_qk(f"qwen0.5b K={k}", key) for k in (2, 3, 4, 6) for key in (TAU, TAU + "_se")]
     + [_qk(f"qwen0.5b K={k}", "speedup") for k in (2, 3, 4, 6)]),
    (RESULTS, "| Qwen 1.5B, the 0.5B untrained | adaptive K, a line between timed K | {} ± {} | {}× "
     "| {} of {} (K = 3: {}) |",
     QWEN_AVX2.format(""), [_qk("qwen0.5b adaptive", k) for k in (TAU, TAU + "_se", "speedup", "drafts", "steps")]
     + [lambda j: j["methods"]["qwen0.5b adaptive"]["adaptive_k"]["k_counts"]["3"]]),
    (RESULTS, "| Qwen 1.5B, `truncated:1` (useless) | fixed K = 4 / adaptive K | {} ± {} / {} ± {} "
     "| {}× / {}× | {} of {} |",
     QWEN_AVX2.format(""), [_qk(m, k) for m in ("truncated:1 K=4", "truncated:1 adaptive") for k in (TAU, TAU + "_se")]
     + [_qk("truncated:1 K=4", "speedup"), _qk("truncated:1 adaptive", "speedup"),
        _qk("truncated:1 adaptive", "drafts"), _qk("truncated:1 adaptive", "steps")]),
    (RESULTS, "| Qwen 1.5B, the 0.5B untrained, again | fixed K = 3 / 6 | {} ± {} / {} ± {} | {}× / {}× | | 0c8208e |",
     QWEN_AVX2.format("-untried"),
     [_qk(f"qwen0.5b K={k}", key, "-untried") for k in (3, 6) for key in (TAU, TAU + "_se")]
     + [_qk(f"qwen0.5b K={k}", "speedup", "-untried") for k in (3, 6)]),
    (RESULTS, "| Qwen 1.5B, the 0.5B untrained, again | adaptive K, an untimed K tried where its best case pays "
     "| {} ± {} | {}× | {} of {} (K = 3: {}) |", QWEN_AVX2.format("-untried"),
     [_qk("qwen0.5b adaptive", k, "-untried") for k in (TAU, TAU + "_se", "speedup", "drafts", "steps")]
     + [lambda j: j["methods"]["qwen0.5b adaptive"]["adaptive_k"]["k_counts"]["3"]]),
    (RESULTS, "| Qwen 1.5B, `truncated:1` (useless), again | adaptive K, an untimed K tried where its best case pays | "
     "{} ± {} | {}× | {} of {} |", QWEN_AVX2.format("-untried"),
     [_qk("truncated:1 adaptive", k, "-untried") for k in (TAU, TAU + "_se", "speedup", "drafts", "steps")]),
    (RESULTS, "the untrained 0.5B (the best fixed K, K = 3: {}×) / `truncated:1` (drafting K = 4 every step: {}×) | | "
     "{}× / {}× | AMD EPYC, AVX2 only", QWEN_AVX2.format("-untried"),
     [_qk("qwen0.5b K=3", "speedup", "-untried"), _qk("truncated:1 K=4", "speedup"),
      _qk("qwen0.5b adaptive", "speedup", "-untried"), _qk("truncated:1 adaptive", "speedup", "-untried")]),
    (RESULTS, "read 1.17× beside the best fixed K's {}× (0.99 of it", QWEN_AVX2.format("-untried"),
     [_qk("qwen0.5b K=3", "speedup", "-untried")]),
]  # fmt: skip

FIGURE = r"(-?\w+(?:\.\w+)*)"  # a number (3.74, 1.00), or a word (false, bf16)


def phrase_pattern(phrase: str) -> re.Pattern:
    """The phrase as a pattern: each `{}` captures a figure, whitespace matches any whitespace."""
    parts = [re.sub(r"(\\\s)+", r"\\s+", re.escape(p)) for p in phrase.split("{}")]
    return re.compile(FIGURE.join(parts))


def as_quoted(value, quoted: str) -> str:
    """The JSON value written as the page writes `quoted`: a float to as many decimals."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        decimals = len(quoted.split(".", 1)[1]) if "." in quoted else 0
        return f"{value:.{decimals}f}"
    return str(value)


def quote_problems(text: str, phrase: str, data, getters) -> list[str]:
    """What differs between the page's figures in `phrase` and the JSON's; the phrase missing is one."""
    found = phrase_pattern(phrase).findall(text)
    if not found:
        return [f"phrase not on the page: {phrase!r}"]
    out = []
    for figures in found:
        figures = (figures,) if isinstance(figures, str) else figures
        for i, (quoted, get) in enumerate(zip(figures, getters, strict=True)):
            expected = as_quoted(get(data), quoted)
            if quoted != expected:
                out.append(f"{phrase!r}: figure {i + 1} is {quoted} on the page, {expected} in the JSON")
    return out


# --- the real pages ------------------------------------------------------------------------------


@pytest.mark.parametrize(("page", "phrase", "path", "getters"), QUOTED, ids=[f"{q[0]}: {q[1][:40]}" for q in QUOTED])
def test_quoted_figures_are_their_json(page, phrase, path, getters):
    assert phrase.count("{}") == len(getters), phrase
    data = json.loads((ROOT / path).read_text())
    assert quote_problems((ROOT / page).read_text(), phrase, data, getters) == [], path


@pytest.mark.parametrize("page", PAGES)
def test_every_cited_json_exists_and_is_stamped(page):
    text = (ROOT / page).read_text()
    assert page_citation_problems(text, ROOT) == {}, page


def test_the_results_page_cites_json_at_all():
    assert len(cited_paths((ROOT / "docs/results.md").read_text())) >= 4


def test_every_results_table_with_figures_cites_its_json():
    assert uncited_tables((ROOT / "docs/results.md").read_text()) == []


@pytest.mark.parametrize("page", PAGES)
def test_no_work_log_words(page):
    assert WORK_LOG.findall((ROOT / page).read_text()) == [], page


# --- the checks themselves fail where they should ------------------------------------------------


STAMPED = {
    "machine": {"cpu": {"model": "AMD EPYC"}},
    "date": "2026-12-02 11:52 UTC",
    "commit": "b490ee2",
    "command": "x",
}


def _write(root: pathlib.Path, rel: str, data) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_the_check_passes_a_stamped_file_and_a_cited_table(tmp_path):
    _write(tmp_path, "results/a/run.json", STAMPED)
    page = "## A\n\n| m | τ |\n|---|---|\n| ours | 1.15 |\n\nJSON: `results/a/run.json`.\n"
    assert page_citation_problems(page, tmp_path) == {}
    assert uncited_tables(page) == []


def test_the_check_fails_on_a_missing_file(tmp_path):
    page = "figures: `results/a/gone.json`"
    assert page_citation_problems(page, tmp_path) == {"results/a/gone.json": ["missing"]}


@pytest.mark.parametrize("part", ["machine", "date", "commit", "command"])
def test_the_check_fails_on_an_incomplete_stamp(tmp_path, part):
    _write(tmp_path, "results/a/run.json", {k: v for k, v in STAMPED.items() if k != part})
    assert page_citation_problems("see results/a/run.json", tmp_path) == {"results/a/run.json": [f"no {part}"]}


def test_the_check_fails_on_an_empty_stamp_value_and_on_a_non_object(tmp_path):
    _write(tmp_path, "results/a/run.json", {**STAMPED, "commit": ""})
    _write(tmp_path, "results/a/list.json", [1, 2])
    assert page_citation_problems("results/a/run.json and results/a/list.json", tmp_path) == {
        "results/a/list.json": ["not a JSON object"],
        "results/a/run.json": ["no commit"],
    }


def test_the_check_fails_on_a_table_without_json_in_its_section():
    page = (
        "## A\n\n| m | τ |\n|---|---|\n| ours | 1.15 |\n\n"
        "## B\n\nJSON: `results/a/run.json`.\n\n| kind | train |\n|---|---|\n| eagle3 | yes |\n"
    )
    assert uncited_tables(page) == ["| m | τ |"]


def test_a_figure_is_a_number_not_the_digit_of_a_name():
    assert NUMBER.search("| ours | 0.73× |") and NUMBER.search("| 1,335 ms |")
    assert not NUMBER.search("| eagle3 | qwen2.5-coder | yes |")


def test_cited_paths_ignore_runs_and_nested_results_folders():
    text = "runs/qwen/results.json, out/results/x.json and `results/peer-race/race.json`"
    assert cited_paths(text) == ["results/peer-race/race.json"]


def test_the_work_log_check_catches_them():
    for text in ("the drafts trained so far", "not faster yet", "Later the same day", "this change's working tree"):
        assert WORK_LOG.search(text), text
    assert not WORK_LOG.search("a yeti knows; nowhere; the as-built layout")


def test_the_quote_check_catches_a_figure_the_json_does_not_hold():
    data = {"tau": {"vllm": 3.7404, "ours": 3.7536}, "agrees": False}
    getters = [lambda j: j["tau"]["vllm"], lambda j: j["tau"]["ours"]]
    phrase = "τ {} in vLLM against {} in ours"
    assert quote_problems("so τ 3.74 in vLLM\n  against 3.75 in ours.", phrase, data, getters) == []
    assert quote_problems("so τ 3.78 in vLLM against 3.75 in ours.", phrase, data, getters) == [
        f"{phrase!r}: figure 1 is 3.78 on the page, 3.74 in the JSON"
    ]
    assert quote_problems("τ 3.74 against 3.75", phrase, data, getters) == [f"phrase not on the page: {phrase!r}"]
    verdict = "(`agrees: {}`)"
    assert quote_problems("(`agrees: true`)", verdict, data, [lambda j: j["agrees"]]) == [
        f"{verdict!r}: figure 1 is true on the page, false in the JSON"
    ]
    assert phrase_pattern("| {} / {} | {}× |").search("| 4.45 / 4.69 | 1.70× |").groups() == ("4.45", "4.69", "1.70")
