"""What a published repo is: its layout and the model card's metadata.

Layout. vLLM loads a draft by Hub id (`--speculative-config '{"model": "ORG/REPO", ...}'`, or
`vllm serve ORG/REPO` for a speculators config), and an id names a repo's root, never a
subfolder. So the vLLM export is the root (config.json, weights, tokenizer, its
draftsmith_export.json), draftsmith's own checkpoint (what `eval`, `bench` and `generate` load)
sits in `draftsmith/`, and the other engines' exports in their folders (`sglang/`, `gguf/`),
which their engines load once downloaded. A named revision (a branch holding the engine layout)
would work too, but every user would then pass `revision` beside the id; the root needs nothing.
A kind without a vLLM export keeps its checkpoint at the root.

Metadata. Built with huggingface_hub's ModelCardData: the base model (the target's Hub id), the
library, the license, the tags (speculative-decoding, the method, speculators where the root is
that format, vllm, draftsmith), the datasets, and `model-index` eval results: τ (mean acceptance
length) per prompt set from each bench/eval JSON, with its sample (prompts, drafts, K,
temperature), and the share of prompts on which an engine's outputs equalled plain decoding in
the `draftsmith crosscheck` record for this checkpoint.
"""

from __future__ import annotations

ROOT_FORMAT = "vllm"  # the export at the repo's root: vLLM takes the repo id as the draft model
CHECKPOINT_DIR = "draftsmith"  # draftsmith's own checkpoint, when an export holds the root
TASK = "text-generation"


def root_format(formats) -> str | None:
    """The format published at the repo root, among the kind's `formats` (None: the checkpoint is)."""
    return ROOT_FORMAT if ROOT_FORMAT in formats else None


def _shape(r: dict) -> str:
    tree = r.get("tree")
    return (
        ("tree " + ", ".join(f"{k}={v}" for k, v in tree.items())) if tree else f"K={r.get('num_speculative_tokens')}"
    )


def _url(repo_id: str) -> str:
    return f"https://huggingface.co/{repo_id}"


def tau_results(results: list[dict], kind: str, repo_id: str) -> list:
    """EvalResults of τ: one per prompt set of each result (its `by_set` split where it mixed
    several), each with the prompts and drafts it was measured on."""
    from huggingface_hub import EvalResult

    out = []
    for r in results:
        source = r.get("_source") or "results"
        sets = r.get("by_set") or {}
        rows = sets.items() if len(sets) > 1 else [(str(r.get("prompts") or "prompts"), r)]
        for name, row in rows:
            sample = {
                "num_prompts": row.get("num_prompts"),
                "drafts": row.get("drafts"),
                "num_speculative_tokens": r.get("num_speculative_tokens"),
                "temperature": r.get("temperature"),
                "max_new_tokens": r.get("max_new_tokens"),
                "dtype": r.get("dtype"),
                "hardware": r.get("hardware"),
                "results_file": source,  # under results/ in this repo
            }
            out.append(
                EvalResult(
                    task_type=TASK,
                    task_name="speculative decoding",
                    dataset_type=name,
                    dataset_name=f"draftsmith prompt set {name}",
                    dataset_config=f"{_shape(r)}, temperature {r.get('temperature')}",
                    metric_type="mean_acceptance_length",
                    metric_name="τ (mean acceptance length)",
                    metric_value=float(row["mean_acceptance_length"]),
                    metric_args={k: v for k, v in sample.items() if v is not None},
                    source_name=f"draftsmith {'bench' if 'speedup' in r else 'eval'} ({kind})",
                    source_url=_url(repo_id),
                )
            )
    return out


def agreement_results(proven: dict | None, repo_id: str) -> list:
    """EvalResults of each engine's `draftsmith crosscheck` record for this checkpoint: the share
    of prompts whose outputs equal plain decoding, with its counts."""
    from huggingface_hub import EvalResult

    out = []
    for fmt, rec in sorted((proven or {}).items()):
        n = rec.get("num_prompts")
        if not n or rec.get("outputs_equal_plain") is None:
            continue
        versions = ", ".join(f"{k} {v}" for k, v in (rec.get("versions") or {}).items())
        args = {
            "num_prompts": n,
            "outputs_equal_plain": rec["outputs_equal_plain"],
            "counts_equal_ours": rec.get("counts_equal_ours"),
            "num_speculative_tokens": rec.get("num_speculative_tokens"),
            "engine": versions or rec.get("engine"),
            "dtype": rec.get("dtype"),
            "date": (rec.get("date") or "")[:10] or None,
        }
        prompts = str(rec.get("prompts") or "crosscheck")
        out.append(
            EvalResult(
                task_type=TASK,
                task_name=f"engine agreement ({fmt} export)",
                dataset_type=prompts,
                dataset_name=f"draftsmith prompt set {prompts}",
                dataset_config=f"K={rec.get('num_speculative_tokens')}, greedy",
                metric_type="outputs_equal_plain",
                metric_name=f"{rec.get('engine')}: share of outputs equal to plain decoding",
                metric_value=rec["outputs_equal_plain"] / n,
                metric_args={k: v for k, v in args.items() if v is not None},
                source_name="draftsmith crosscheck",
                source_url=_url(repo_id),
            )
        )
    return out


def card_yaml(
    *,
    kind_tag: str,
    causal_lm: bool,
    base_model: str | None,
    license: str,
    datasets: list[str],
    repo_id: str,
    results: list[dict],
    kind: str,
    proven: dict | None = None,
    root: dict | None = None,
) -> str:
    """The card's YAML header (without the `---` lines). `root`: the root export's
    draftsmith_export.json (None: the checkpoint is the root)."""
    from huggingface_hub import ModelCardData

    tags = ["speculative-decoding", kind_tag]
    if root is not None:
        tags += (["speculators"] if root.get("speculators_model_type") else []) + [ROOT_FORMAT]
    evals = tau_results(results, kind, repo_id) + agreement_results(proven, repo_id)
    data = ModelCardData(
        base_model=base_model,
        library_name="transformers" if causal_lm else "draftsmith",
        license=license,
        tags=[*tags, "draftsmith"],
        datasets=datasets or None,
        pipeline_tag="text-generation" if causal_lm else None,
        model_name=repo_id.split("/")[-1] if evals else None,
        eval_results=evals or None,
    )
    return data.to_yaml()


__all__ = ["CHECKPOINT_DIR", "ROOT_FORMAT", "agreement_results", "card_yaml", "root_format", "tau_results"]
