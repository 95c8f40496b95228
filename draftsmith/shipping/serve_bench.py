"""`draftsmith serve-bench`: a drafter's speed and acceptance in vLLM's server at real load.

Two OpenAI-compatible vLLM servers, one serving the target with the drafter and one without it
(started here from a checkpoint's `--format vllm` export, or the user's own: `--base-url`,
`--baseline-url`), get the same streamed requests at each concurrency. Per level and prompt
category: output tokens/s, requests/s, TTFT, TPOT and ITL (median, p99, in ms), tau and the
acceptance per draft position from the drafted server's spec-decode counters (read before and
after the level), each figure's speedup over the plain server, and the crossover: the first
concurrency where the drafter stops paying. One table, one JSON (stamped with the machine, the
engine and the exact command), one PNG.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from draftsmith.errors import DraftsmithError, Interrupted
from draftsmith.shipping import serve_load, serve_vllm_bench
from draftsmith.shipping.serve_report import (  # noqa: F401 (importable from here, as before)
    ALL,
    LATENCIES,
    RATES,
    _add,
    _fmt,
    _ratio,
    _spec_value,
    combine,
    crossovers,
    format_table,
    plot,
)
from draftsmith.shipping.serve_requests import _file_rows, load_requests, long_context_requests  # noqa: F401

log = logging.getLogger(__name__)
DEFAULT_PROMPTS = "mt-bench,humaneval"


def add_arguments(p) -> None:
    p.add_argument(
        "checkpoint",
        nargs="?",
        default=None,
        help="a checkpoint or run folder (its best/ or final/); not needed with --base-url and --baseline-url",
    )
    p.add_argument("--base-url", default=None, help="a running vLLM server with the drafter, e.g. http://h:8000/v1")
    p.add_argument("--baseline-url", default=None, help="a running vLLM server of the same target without a drafter")
    p.add_argument("--model", default=None, help="the served model name (default: the first at /v1/models)")
    p.add_argument("--target", default=None, help="the target to serve (default: the checkpoint's own)")
    p.add_argument("--num-speculative-tokens", "-k", type=int, default=None, help="K (default: the kind's)")
    p.add_argument(
        "--prompts",
        default=DEFAULT_PROMPTS,
        help="comma list of mt-bench (first turns, by category), humaneval, chat, code, or a SPEED-Bench-layout "
        "JSONL file (one row per prompt: category plus turns, messages or prompt); its categories become rows",
    )
    p.add_argument("--categories", default=None, help="comma list: only these categories (default: all)")
    p.add_argument(
        "--long-context",
        type=int,
        default=0,
        metavar="TOKENS",
        help="also a long-context category: Python source of about TOKENS tokens to explain (default 0: none)",
    )
    from draftsmith.evaluation.switches import TEMPLATE_FLAG, TEMPLATE_HELP

    p.add_argument(TEMPLATE_FLAG, dest="chat_template_kwargs", default=None, help=TEMPLATE_HELP + " (chat API only)")
    p.add_argument(
        "--thinking",
        default=None,
        help="on,off (or one of them): every category once per setting of the chat template's enable_thinking "
        "switch (Qwen3 and others), as rows 'CATEGORY thinking:on/off', on top of the other switches (chat API only)",
    )
    p.add_argument("--num-prompts", type=int, default=None, help="the first N prompts of each set (default: all)")
    p.add_argument("--concurrency", default="1,4,16,64", help="requests in flight, comma list (default 1,4,16,64)")
    p.add_argument(
        "--num-requests",
        type=int,
        default=None,
        help="requests per category and level (default: 32 or the largest --concurrency, whichever is more); a "
        "number below the largest --concurrency is refused: that level could never have all its requests in flight",
    )
    p.add_argument("--warmup", type=int, default=None, help="warm-up requests per level (default: the concurrency)")
    p.add_argument("--temperature", default="0", help="comma list of finite numbers >= 0, e.g. 0,1 (default 0)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per request at most (default 256)")
    p.add_argument("--ignore-eos", action="store_true", help="every request generates --max-tokens (vLLM extension)")
    p.add_argument("--api", choices=["chat", "completions"], default="chat", help="the endpoint (default chat)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        help="seconds one request may take, > 0 (default 600); Ctrl-C stops the requests in flight at once",
    )
    p.add_argument("--output-dir", default="serve-bench", help="results.json, speedup.png, export and server logs")
    p.add_argument(
        "--driver",
        choices=serve_vllm_bench.DRIVERS,
        default="auto",
        help="the load generator: vllm (`vllm bench serve` of the vLLM serve-bench starts or finds, vLLM's own "
        "figures), draftsmith (serve-bench's own streamed requests), auto (vllm where it is installed and every "
        "request is one user message; default); the JSON names the one used",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        help="the served model's tokenizer for `vllm bench serve` with --base-url (default: --target's, else the "
        "served model name)",
    )
    eng = p.add_argument_group("the vLLM servers started here (passed through to `vllm serve`)")
    from draftsmith.shipping.engines.vllm_engine import add_vllm_argument

    add_vllm_argument(eng)
    eng.add_argument("--tensor-parallel-size", type=int, default=None)
    eng.add_argument("--pipeline-parallel-size", type=int, default=None)
    eng.add_argument("--max-num-seqs", type=int, default=None)
    eng.add_argument("--gpu-memory-utilization", type=float, default=None)
    eng.add_argument("--dtype", default="auto", help="vLLM's --dtype (default auto)")
    eng.add_argument("--max-model-len", type=int, default=4096)
    eng.add_argument("--engine-arg", action="append", default=[], metavar="K=V", help="any `vllm serve --K V`")
    eng.add_argument("--startup-timeout", type=float, default=1800.0, help="seconds a server may take to start")


def parse_list(text: str, flag: str, cast, minimum=None) -> list:
    try:
        values = [cast(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise DraftsmithError(f"{flag} {text}: a comma list of numbers, e.g. 1,4,16") from None
    if not values or (minimum is not None and min(values) < minimum):
        raise DraftsmithError(f"{flag} {text}: a comma list of numbers >= {minimum}")
    return sorted(set(values))


def engine_args(args) -> list[str]:
    """`vllm serve` arguments from the pass-through flags and every --engine-arg K=V (K alone: a switch)."""
    out = []
    for flag in ("tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs", "gpu_memory_utilization"):
        if getattr(args, flag) is not None:
            out += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    for item in args.engine_arg:
        key, eq, value = item.partition("=")
        key = key.strip().lstrip("-")
        if not key:
            raise DraftsmithError(f"--engine-arg {item!r}: write K=V, e.g. --engine-arg enforce-eager")
        out += [f"--{key}"] + ([value] if eq else [])
    return out


def _level(url, model, flag, batch, c, t, args, drafted, name, warm, kw, first: bool, where: str):
    """One category's requests at one level -> (row, records, wall seconds, peak in flight, the
    spec-decode counters' difference or None on the plain server), through `vllm bench serve` where
    serve-bench chose it (args.driver_python set), else through our driver."""
    left = (f"{flag} {url}: the spec_decode counters left /metrics during the sweep ({where}): the server no longer "
            "serves a drafter")  # fmt: skip
    gone = f"{flag} {url}: /metrics has no spec_decode counters: the server is not serving a drafter" if first else left
    if getattr(args, "driver_python", None):
        row, records, delta = serve_vllm_bench.run_level(
            args.driver_python, url, model, args.driver_tokenizer, batch, c,
            pathlib.Path(args.output_dir).expanduser() / "vllm-bench", name, temperature=t, warmup=warm,
            flag=flag, **kw)  # fmt: skip
        if drafted and delta is None:  # vLLM reports no figures for a level that drafted nothing
            if serve_load.read_counters(url, flag) is None:
                raise DraftsmithError(gone)
            delta = serve_load.SpecCounters()
        return row, records, row["wall_s"], row["max_concurrency_seen"] or 0, delta if drafted else None
    if warm:
        serve_load.run_level(url, model, [batch[i % len(batch)] for i in range(warm)], c, temperature=t, **kw)
    before = serve_load.read_counters(url, flag)
    if drafted and before is None:
        raise DraftsmithError(gone)
    peak = [0]
    records, wall_s = serve_load.run_level(url, model, batch, c, temperature=t, peak=peak, **kw)
    row = serve_load.level_figures(records, wall_s, peak[0])
    row["driver"] = serve_vllm_bench.OURS
    if not drafted:
        return row, records, wall_s, peak[0], None
    after = serve_load.read_counters(url, flag)
    if after is None:
        raise DraftsmithError(left)
    return row, records, wall_s, peak[0], after.minus(before)


def sweep(url, model, flag, sets, levels, temps, args, drafted: bool, out: dict | None = None) -> dict:
    """(temperature, category, concurrency) -> that level's figures, plus the counters' acceptance
    on the drafted server; an `all` category per level pools every category's requests. Each
    level goes into `out` as it finishes, so that a sweep stopped by an error or Ctrl-C keeps them.
    The first category of each level is preceded by the level's warm-up requests."""
    kw = dict(api=args.api, max_tokens=args.max_tokens, seed=args.seed, ignore_eos=args.ignore_eos)
    kw["timeout"] = args.request_timeout
    out, side = {} if out is None else out, "drafted" if drafted else "plain"
    for t in temps:
        for c in levels:
            warm = c if args.warmup is None else args.warmup
            pooled, wall, pooled_spec, peak_all, spec_ok = [], 0.0, None, 0, True
            for i, (cat, reqs) in enumerate(sets.items()):
                batch = [reqs[j % len(reqs)] for j in range(args.num_requests)]
                name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{side}-T{t:g}-c{c}-{cat}")
                where = f"T={t:g}, {c} in flight, {cat}"
                try:
                    row, records, wall_s, peak, delta = _level(url, model, flag, batch, c, t, args, drafted, name,
                                                               warm if i == 0 else 0, kw, not out, where)  # fmt: skip
                except DraftsmithError as e:
                    # auto: vLLM's benchmark that cannot run at all (no tokenizer it can load, say) leaves
                    # the sweep to our driver, before any level is measured, so that no sweep mixes the two
                    if not (args.driver_python and args.driver == "auto" and not out and i == 0):
                        raise
                    log.warning("%s: vllm bench serve could not run (%s); serve-bench sends the requests itself",
                                flag, e)  # fmt: skip
                    args.driver_python, args.driver_fallback = None, str(e)
                    row, records, wall_s, peak, delta = _level(url, model, flag, batch, c, t, args, drafted, name,
                                                               warm, kw, True, where)  # fmt: skip
                errors = [r.error for r in records if r.error]
                if records and len(errors) == len(records):
                    raise DraftsmithError(f"{flag} {url}: every request failed, e.g. {errors[0]}")
                if errors:
                    log.warning("%s: T=%g, %d in flight, %s: %d of %d requests failed, e.g. %s", flag, t, c, cat,
                                len(errors), len(records), errors[0])  # fmt: skip
                if drafted:
                    row["spec"] = delta.figures()
                    if delta.went_backwards():
                        spec_ok = False
                        log.warning("%s %s: the spec-decode counters went backwards during T=%g, %d in flight, %s "
                                    "(the server restarted?): that level's acceptance is not reported", flag, url, t,
                                    c, cat)  # fmt: skip
                    else:
                        pooled_spec = delta if pooled_spec is None else _add(pooled_spec, delta)
                out[(t, cat, c)] = row
                pooled += records
                wall += wall_s
                peak_all = max(peak_all, peak)
                log.info("%s: T=%g, %d in flight, %s: %.1f tok/s", side, t, c, cat, row["output_tokens_per_s"] or 0)
            row = serve_load.level_figures(pooled, wall, peak_all)
            row["driver"] = out[(t, next(iter(sets)), c)].get("driver")
            if drafted:
                if spec_ok and pooled_spec is not None:
                    row["spec"] = pooled_spec.figures()
                else:
                    row["spec"] = serve_load.SpecCounters(-1.0).figures()  # not valid: a category's went backwards
            out[(t, ALL, c)] = row
    return out


# --- the stamp ----------------------------------------------------------------------------------------------


def command_line(args) -> str:
    if pathlib.Path(sys.argv[0]).name == "draftsmith" and sys.argv[1:2] == ["serve-bench"]:
        return shlex.join(["draftsmith", *sys.argv[1:]])
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    argv = ["draftsmith", "serve-bench"] + ([args.checkpoint] if args.checkpoint else [])
    for a in p._actions:
        if not a.option_strings or a.dest == "help":
            continue
        v = getattr(args, a.dest, a.default)
        if v == a.default:
            continue
        flag = a.option_strings[0]
        argv += [flag] if v is True else [x for item in v for x in (flag, item)] if isinstance(v, list) else [flag, v]
    return shlex.join(map(str, argv))


def machine() -> dict:
    from draftsmith.infer.hardware import cpu_info, format_cpu

    cpu = cpu_info()
    out = {"cpu": format_cpu(cpu), "cpu_flags": cpu.get("flags"), "gpus": []}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)  # fmt: skip
        out["gpus"] = [g.strip() for g in q.stdout.splitlines() if g.strip()] if q.returncode == 0 else []
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def git_commit() -> str | None:
    try:
        q = subprocess.run(["git", "rev-parse", "HEAD"], cwd=pathlib.Path(__file__).resolve().parents[2],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
        return q.stdout.strip() or None if q.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


# --- the command --------------------------------------------------------------------------------------------


def check_output_dir(path: pathlib.Path) -> None:
    """--output-dir can hold the results, checked before any server is started or request sent:
    it (or the nearest folder above it that exists) is a folder serve-bench may write in."""
    if path.exists():
        if not path.is_dir():
            raise DraftsmithError(f"--output-dir {path}: is a file, not a folder")
        try:
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as e:
            raise DraftsmithError(f"--output-dir {path}: cannot write in it ({e.strerror or e})") from None
        return
    above = path.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise DraftsmithError(f"--output-dir {path}: {above} is a file, not a folder")
    if not os.access(above, os.W_OK | os.X_OK):
        raise DraftsmithError(f"--output-dir {path}: cannot create it ({above} is not writable)")


def _check(args):
    levels = parse_list(args.concurrency, "--concurrency", int, 1)
    temps = parse_list(args.temperature, "--temperature", float, 0)
    bad = [t for t in temps if not math.isfinite(t)]
    if bad:  # json cannot carry NaN or Infinity: the requests would not be JSON
        raise DraftsmithError(f"--temperature {args.temperature}: must be finite numbers >= 0")
    for flag, v, least in (("--num-requests", args.num_requests, 1), ("--max-tokens", args.max_tokens, 1),
                           ("--warmup", args.warmup, 0), ("--num-prompts", args.num_prompts, 1),
                           ("--num-speculative-tokens", args.num_speculative_tokens, 1),
                           ("--long-context", args.long_context, 0)):  # fmt: skip
        if v is not None and v < least:
            raise DraftsmithError(f"{flag} must be >= {least}")
    if not (math.isfinite(args.request_timeout) and args.request_timeout > 0):
        raise DraftsmithError(f"--request-timeout {args.request_timeout:g}: must be a number of seconds > 0")
    if args.num_requests is None:
        args.num_requests = max(32, max(levels))
    if args.num_requests < max(levels):
        raise DraftsmithError(
            f"--num-requests {args.num_requests} cannot fill {max(levels)} requests in flight: give --num-requests "
            f">= {max(levels)} (the largest --concurrency) or lower --concurrency"
        )
    if bool(args.base_url) != bool(args.baseline_url):
        raise DraftsmithError(
            "give both --base-url (drafted) and --baseline-url (plain), or neither: then serve-bench starts both "
            "from the checkpoint"
        )
    if not args.base_url and not args.checkpoint:
        raise DraftsmithError("name a checkpoint (or run folder), or give --base-url and --baseline-url")
    if args.base_url:
        a = serve_load.check_url(args.base_url, "--base-url")
        b = serve_load.check_url(args.baseline_url, "--baseline-url")
        if a.lower() == b.lower():
            raise DraftsmithError(
                f"--base-url and --baseline-url are the same server ({a}): give the server with the drafter and "
                "another without it"
            )
    engine_args(args)  # its errors, before anything starts
    check_output_dir(pathlib.Path(args.output_dir).expanduser())
    return levels, temps


def _keep_what_finished(out: pathlib.Path, drafted: dict, baseline: dict, why: str, args, version) -> str:
    """results.json with the levels that finished on both servers (`rows`) and those only one
    finished (`unpaired`), marked incomplete; '' where no level finished."""
    if not drafted and not baseline:
        return ""
    rows = combine(drafted, baseline)
    unpaired = [{"server": side, "temperature": t, "category": cat, "concurrency": c, "figures": f}
                for side, found, other in (("drafted", drafted, baseline), ("baseline", baseline, drafted))
                for (t, cat, c), f in found.items() if (t, cat, c) not in other]  # fmt: skip
    result = {"complete": False, "stopped": why, "rows": rows, "unpaired": unpaired, "crossover": crossovers(rows),
              "stamp": _stamp(args, version, {})}  # fmt: skip
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    except OSError:
        return ""
    return str(out / "results.json")


def _stamp(args, version, info) -> dict:
    return {
        "machine": machine(),
        "engine": {"name": "vllm", "version": version},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "command": command_line(args),
        "prompts": args.prompts,
        "num_requests": args.num_requests,
        "max_tokens": args.max_tokens,
        "api": args.api,
        **_template_stamp(args),
        **info,
    }


def _template_stamp(args) -> dict:
    """The chat template's switches the requests carried and where they came from (the flag, the
    checkpoint, none), with --thinking's settings where it split the rows."""
    kwargs, source = getattr(args, "template", None) or ({}, "none")
    out = {"chat_template_kwargs": kwargs, "chat_template_kwargs_from": source}
    if args.thinking:
        out["thinking"] = [v.strip() for v in args.thinking.split(",") if v.strip()]
    return out


def choose_template(args, ckpt) -> tuple[dict, str]:
    """(switches, source) for every request, by eval's and bench's rule (the flag, else the
    checkpoint's record, else none), and the line saying which; the completions API renders no
    chat template, so it sends none (the flag or --thinking there is refused)."""
    from draftsmith.evaluation.switches import TEMPLATE_FLAG, chosen_template, template_line

    kwargs, source = chosen_template(args.chat_template_kwargs, ckpt.meta if ckpt is not None else None)
    if args.api != "chat":
        if args.thinking:
            raise DraftsmithError("--thinking switches the chat template: it needs --api chat")
        if source == TEMPLATE_FLAG and kwargs:
            raise DraftsmithError(f"{TEMPLATE_FLAG} switches the chat template: it needs --api chat")
        skipped = f" (the checkpoint's {json.dumps(kwargs)} cannot be sent)" if kwargs else ""
        print(f"chat template switches: none (--api {args.api} renders no chat template){skipped}", flush=True)
        return {}, f"--api {args.api}"
    line = template_line(kwargs, source)
    if args.thinking:
        line += f"; enable_thinking per row (--thinking {args.thinking})"
    print(line, flush=True)
    return kwargs, source


def run(args) -> int:
    levels, temps = _check(args)
    thinking = [v.strip() for v in args.thinking.split(",") if v.strip()] if args.thinking else None
    ckpt = None
    if args.checkpoint:  # its recorded switches, also where --base-url serves it
        from draftsmith.models.checkpoint import Checkpoint

        ckpt = Checkpoint.open(args.checkpoint)
    args.template = choose_template(args, ckpt)
    sets = load_requests(args.prompts, args.num_prompts, args.categories, args.long_context, thinking,
                         args.template[0])  # fmt: skip
    out = pathlib.Path(args.output_dir).expanduser()
    info: dict = {}
    drafted, baseline, version = {}, {}, None
    try:
        if args.base_url:
            for flag, url in (("--base-url", args.base_url), ("--baseline-url", args.baseline_url)):
                serve_load.read_counters(url, flag)  # reachable and vLLM's, before the sweep
            model = args.model or serve_load.served_model(args.base_url)
            base_model = args.model or serve_load.served_model(args.baseline_url, "--baseline-url")
            version = serve_load.engine_version(args.base_url)
            found = serve_vllm_bench.found_vllm(args)
            info["driver"] = serve_vllm_bench.pick(args, sets, found, serve_vllm_bench.tokenizer(args, model))
            sweep(args.base_url, model, "--base-url", sets, levels, temps, args, True, drafted)
            sweep(args.baseline_url, base_model, "--baseline-url", sets, levels, temps, args, False, baseline)
        else:
            version, info = _managed(args, ckpt, out, sets, levels, temps, drafted, baseline)
    except DraftsmithError as e:
        kept = _keep_what_finished(out, drafted, baseline, str(e), args, version)
        if kept:
            raise DraftsmithError(f"{e} (the levels that finished are in {kept})") from None
        raise
    except KeyboardInterrupt:
        kept = _keep_what_finished(out, drafted, baseline, "interrupted (Ctrl-C)", args, version)
        raise Interrupted(
            f"the levels that finished are in {kept} (marked incomplete)" if kept else "no level had finished"
        ) from None
    if getattr(args, "driver_fallback", None):
        why = f"vllm bench serve failed: {args.driver_fallback}"
        info["driver"] = {"name": serve_vllm_bench.OURS_LABEL, "why": why}
    rows = combine(drafted, baseline)
    result = {"complete": True, "rows": rows, "crossover": crossovers(rows), "stamp": _stamp(args, version, info)}
    print(format_table(result))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out / 'results.json'}")
    if plot(result, out / "speedup.png"):
        print(f"wrote {out / 'speedup.png'}")
    return 0


def served_dtype(log: pathlib.Path) -> str | None:
    """The dtype vLLM ran the target in, from its engine-config log line (`dtype=torch.bfloat16`):
    `--dtype auto` takes the model config's, which is what a comparison with crosscheck must match."""
    import re

    try:
        found = re.search(r"\bdtype=torch\.(\w+)", log.read_text(errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def _managed(args, ckpt, out: pathlib.Path, sets, levels, temps, drafted: dict, baseline: dict):
    """Export the checkpoint, then serve the target with the drafter and sweep, then without it and sweep
    (one server at a time: both at once would share the machine and skew each other's figures)."""
    from draftsmith.models.sources import resolve_model
    from draftsmith.shipping.engines.vllm_engine import VLLMServer
    from draftsmith.shipping.export import EXPORT_META, export
    from draftsmith.shipping.export.common import layout
    from draftsmith.shipping.installs import resolve_vllm

    target = args.target or ckpt.target_to_load()[0]
    if target is None:
        raise DraftsmithError(f"{ckpt.path}: names no target; pass --target")
    target_dir = resolve_model(target).path
    install = resolve_vllm(args.vllm)  # before the export: one line if there is no vLLM to start
    draft_dir = out / "export-vllm"
    if draft_dir.exists():
        shutil.rmtree(draft_dir)
    out.mkdir(parents=True, exist_ok=True)
    export(ckpt.path, "vllm", draft_dir, num_speculative_tokens=args.num_speculative_tokens, verifier=str(target_dir))
    k = json.loads((draft_dir / EXPORT_META).read_text())["num_speculative_tokens"]  # the kind's default, capped
    lay = layout(ckpt.kind, "vllm")
    spec = {"method": lay.method, "model": str(draft_dir), "num_speculative_tokens": k, **(lay.spec_extra or {})}
    common = dict(served_name="target", dtype=args.dtype, max_model_len=args.max_model_len,
                  startup_s=args.startup_timeout, vllm=install)  # fmt: skip
    extra = engine_args(args)
    driver = serve_vllm_bench.pick(args, sets, install, args.tokenizer or str(target_dir))
    with VLLMServer(target_dir, log_path=out / "vllm-drafted.log", extra_args=[*extra, "--speculative-config",
                    json.dumps(spec)], **common) as s:  # fmt: skip
        version = serve_load.engine_version(s.url)
        sweep(s.url, "target", "drafted server", sets, levels, temps, args, True, drafted)
    with VLLMServer(target_dir, log_path=out / "vllm-plain.log", extra_args=extra, **common) as s:
        sweep(s.url, "target", "plain server", sets, levels, temps, args, False, baseline)
    info = {"checkpoint": ckpt.identity(), "target": str(target), "speculative_config": spec, "engine_args": extra,
            "dtype": served_dtype(out / "vllm-drafted.log") or args.dtype, "vllm": install.stamp(),
            "driver": driver}  # fmt: skip
    return version, info
