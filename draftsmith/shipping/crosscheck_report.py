"""What `draftsmith crosscheck` leaves behind (draftsmith/shipping/crosscheck.py runs it): the record
in the checkpoint folder that `publish` reads to claim an engine on the model card, and the printed
report. Both say where our runtime showed agreement: the device, its GPU's or CPU's name, the dtype."""

from __future__ import annotations

import datetime
import json
import logging
import pathlib

from draftsmith.shipping.export.common import CROSSCHECK_RECORD

log = logging.getLogger("draftsmith.shipping.crosscheck")


# --- the record publish reads -----------------------------------------------------------------------


def write_record(ckpt: pathlib.Path, result: dict) -> pathlib.Path | None:
    """Record in `ckpt`/crosscheck.json each engine of `result` that agreed with our runtime (and
    drop the record of one that did not): what the model card may claim for this checkpoint.
    Records of engines not in this run are kept; one of another checkpoint is dropped."""
    from draftsmith.models import checkpoint_identity
    from draftsmith.shipping.export.format import formats

    engine_formats = {f.crosscheck: f.name for f in formats() if f.crosscheck}  # as crosscheck's ENGINE_FORMATS

    identity = checkpoint_identity(ckpt)
    path = ckpt / CROSSCHECK_RECORD
    records = {e: r for e, r in read_records(ckpt).items() if r.get("checkpoint_sha256") == identity["sha256"]}
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    for engine in result["engines"]:
        ag = (result["runtimes"].get(engine) or {}).get("agreement")
        if not ag or not ag["agrees"]:
            records.pop(engine, None)
            continue
        records[engine] = {
            "engine": engine,
            "versions": (result["engine_info"].get(engine) or {}).get("versions") or {},
            # which install ran (vLLM: its python, version, how it was chosen); None where not told
            "install": (result["engine_info"].get(engine) or {}).get("install"),
            "format": engine_formats[engine],
            "kind": result["kind"],
            "num_speculative_tokens": result["num_speculative_tokens"],
            "prompts": result["prompts"],
            "num_prompts": ag["prompts"],
            "max_new_tokens": result["max_new_tokens"],
            "outputs_equal_plain": ag["outputs_equal_plain"],
            "counts_equal_ours": ag["counts_equal_ours"],
            "agrees": True,
            "date": date,
            "dtype": result["dtype"],
            # Where our side decoded (an older record has only the CPU: it ran there).
            "device": result.get("device", "cpu"),
            "hardware": result.get("hardware") or (result.get("cpu") or {}).get("model"),
            "placement": result.get("placement"),
            "cpu": result["cpu"],
            "checkpoint_sha256": identity["sha256"],
        }
    try:
        path.write_text(json.dumps({"engines": records}, indent=2) + "\n")
    except OSError as e:  # a read-only checkpoint: the run stands, the card just cannot claim it
        log.warning("could not record the cross-check in %s (%s)", path, e.strerror or e)
        return None
    return path


def read_records(ckpt) -> dict[str, dict]:
    """engine -> its passing record in `ckpt`/crosscheck.json ({} when there is none or it is unreadable)."""
    try:
        data = json.loads((pathlib.Path(ckpt) / CROSSCHECK_RECORD).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    engines = data.get("engines") if isinstance(data, dict) else None
    return {e: r for e, r in (engines or {}).items() if isinstance(r, dict) and r.get("agrees") is True}


def hardware_name(device) -> str:
    """What our side decoded on, in the words bench uses: the GPU's name, or the CPU's model."""
    import torch

    from draftsmith.evaluation.bench import cpu_info

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_info()["model"]


def format_crosscheck(result: dict) -> str:
    from draftsmith.evaluation.bench import format_cpu
    from draftsmith.evaluation.bench_report import kernel_lines

    device = result.get("device", "cpu")
    lines = [
        f"{result['kind']} draft {result['checkpoint']} for {result['target']}: greedy, {result['dtype']}, "
        f"chain k={result['num_speculative_tokens']}, {result['num_prompts']} prompts ({result['prompts']}) x "
        f"{result['max_new_tokens']} tokens",
        f"ours on {device} ({result.get('hardware') or result['cpu']['model']}), {result['dtype']}; "
        f"cpu: {format_cpu(result['cpu'])}",
        f"{'runtime':<20}{'tau (± se)':>14}{'accept':>8}{'tok/s':>8}{'speedup':>9}{'=plain':>8}{'=ours':>7}"
        "  per-position",
    ]
    lines[2:2] = [f"ours, {line}" for line in kernel_lines(result.get("cpu_matmul"))]
    n = result["num_prompts"]
    for name, r in result["runtimes"].items():
        ag = r.get("agreement")
        counts = "-" if ag is None else f"{ag['counts_equal_ours']}/{n}"
        se = r.get("mean_acceptance_length_se")  # over the prompts; absent from records before it
        tau = f"{r['mean_acceptance_length']:.2f}" + (f" ± {se:.2f}" if se is not None else "")
        tau = "-" if name.endswith("plain") else tau
        rate = "-" if r["draft_acceptance_rate"] is None else f"{r['draft_acceptance_rate']:.2f}"
        speed = "-" if "speedup" not in r else f"{r['speedup']:.2f}x"
        tps = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.2f}"
        lines.append(
            f"{name:<20}{tau:>14}{rate:>8}{tps:>8}{speed:>9}{r['outputs_equal_plain']:>5}/{n}"
            f"{counts:>7}  " + " ".join(f"{a:.2f}" for a in r["per_position_acceptance"])
        )
    for name, r in result["runtimes"].items():
        ag = r.get("agreement")
        if ag is None:
            continue
        verdict = "agrees with" if ag["agrees"] else "DISAGREES with"
        taus = ""
        if not ag.get("exact_counts", True) and ag.get("tau_ours") and ag.get("tau_engine"):
            taus = f"; {result['dtype']}: tau {ag['tau_engine']:.3f} vs ours {ag['tau_ours']:.3f} (within 3% required)"
        lines.append(
            f"{name} {verdict} {r['reference']}: outputs = plain on {ag['outputs_equal_plain']}/{n}, "
            f"acceptance counts = ours on {ag['counts_equal_ours']}/{n}{taus}"
        )
        for issue in ag["issues"]:
            lines.append(f"  prompt {issue['prompt']}: {_describe(issue)}")
    return "\n".join(lines)


def _describe(issue: dict) -> str:
    parts = []
    if "first_differing_token" in issue:
        gap = issue.get("target_top2_gap")
        why = (
            ""
            if gap is None
            else f" (target top-2 gap {gap:.2e}: "
            + ("a near-tie, float differences explain it)" if issue["explained"] else "NOT a near-tie)")
        )
        parts.append(f"output differs from token {issue['first_differing_token']}{why}")
    if "counts" in issue:
        c = issue["counts"]
        rounding = " (same output: the drafts rounded differently)" if issue.get("counts_differ_by_rounding") else ""
        parts.append(
            f"counts (drafts, drafted, accepted, per-position) ours {c['ours']} vs engine {c['engine']}{rounding}"
        )
    return "; ".join(parts)
