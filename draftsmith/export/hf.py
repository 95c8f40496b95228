"""`hf`: the transformers-loadable layout (checked against transformers 5.x, the version this
project runs on: `AutoModelForCausalLM.from_pretrained` and `generate(assistant_model=...)`).

- draft_lm (and every kind declared `causal_lm` in draftsmith/kinds.py): a plain causal-LM folder
  (config.json of the LM itself, safetensors weights,
  generation_config.json, tokenizer). It loads with `AutoModelForCausalLM.from_pretrained` and
  drafts for the target through `target.generate(..., assistant_model=draft)`.
- medusa / eagle / eagle3: our own layout (config.json of MedusaConfig / EagleConfig /
  Eagle3Config, weights named as in models/), loaded by draftsmith's `from_pretrained`
  (`draftsmith generate --draft DIR`, `load_drafter(DIR, target)`); transformers has no class
  for these heads. drafter.json stays so the folder is still a draftsmith checkpoint.

Both are the checkpoint minus what only training needs (optimizer state, trainer state, the
LoRA adapters whose merge is already in the weights).
"""

from __future__ import annotations

import pathlib
import shutil

from draftsmith.kinds import KINDS

from .common import TRAINING_ONLY, Checkpoint, Layout, check_folder, layout

ENGINE = "transformers"
CHECKED_AGAINST = (
    "transformers 5.x (AutoModelForCausalLM.from_pretrained, GenerationMixin.generate(assistant_model=...))"
)

# Training artefacts left out of every hf export (LoRA adapters: their merge is in the weights).
SKIPPED = (*TRAINING_ONLY, "adapter", "target_adapter")

DRAFT_LM_REQUIRED_KEYS = ("architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers")
MEDUSA_REQUIRED_KEYS = ("model_type", "hidden_size", "vocab_size", "num_heads", "num_layers", "share_lm_head", "target")
EAGLE_REQUIRED_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_parameters",
    "max_position_embeddings",
    "hidden_act",
    "vocab_size",
    "target",
    "hidden_layers",
)
EAGLE3_REQUIRED_KEYS = (*EAGLE_REQUIRED_KEYS, "draft_vocab_size", "target_hidden_size")
# Our own weight names (models/medusa.py, models/eagle.py, models/eagle3.py).
ATTN = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight")
MLP = ("mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")
EAGLE_WEIGHTS = ("fc.weight", *(f"layers.0.{n}" for n in (*ATTN, *MLP, "post_attention_layernorm.weight")))
EAGLE3_WEIGHTS = (
    "fc.weight",
    *(
        f"midlayer.{n}"
        for n in (*ATTN, *MLP, "input_layernorm.weight", "hidden_norm.weight", "post_attention_layernorm.weight")
    ),
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
)


def medusa_weight_names(num_heads: int, num_layers: int, share_lm_head: bool) -> list[str]:
    names = [
        f"blocks.{k}.{i}.linear.{p}" for k in range(num_heads) for i in range(num_layers) for p in ("weight", "bias")
    ]
    if not share_lm_head:
        names += [f"lm_heads.{k}.weight" for k in range(num_heads)]
    return names


def expected_weights(kind: str, config: dict) -> dict | None:
    """Name -> shape of the weights our loader reads for `config`; None for a causal-LM kind
    (whatever LM it is: transformers checks it)."""
    shapes = layout(kind, "hf").shapes
    return shapes(config) if shapes else None


def medusa_shapes(config: dict) -> dict:
    d, v, K, L = (
        int(config["hidden_size"]),
        int(config["vocab_size"]),
        int(config["num_heads"]),
        int(config["num_layers"]),
    )
    out = {}
    for k in range(K):
        for i in range(L):
            out[f"blocks.{k}.{i}.linear.weight"] = (d, d)
            out[f"blocks.{k}.{i}.linear.bias"] = (d,)
        if not config.get("share_lm_head"):
            out[f"lm_heads.{k}.weight"] = (v, d)
    return out


def eagle_shapes(config: dict, prefix: str, eagle3: bool) -> dict:
    """Shapes of an EAGLE draft's weights from a config holding the Llama layer fields (ours,
    or an engine's): the decoder layer's q/k/v read 2d in EAGLE-3 (embedding ⊕ hidden)."""
    d = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    hd = int(config.get("head_dim") or d // heads)
    inter = int(config["intermediate_size"])
    attn_in = 2 * d if eagle3 else d
    out = {
        f"{prefix}self_attn.q_proj.weight": (heads * hd, attn_in),
        f"{prefix}self_attn.k_proj.weight": (kv * hd, attn_in),
        f"{prefix}self_attn.v_proj.weight": (kv * hd, attn_in),
        f"{prefix}self_attn.o_proj.weight": (d, heads * hd),
        f"{prefix}mlp.gate_proj.weight": (inter, d),
        f"{prefix}mlp.up_proj.weight": (inter, d),
        f"{prefix}mlp.down_proj.weight": (d, inter),
        f"{prefix}post_attention_layernorm.weight": (d,),
    }
    if not eagle3:
        out["fc.weight"] = (d, 2 * d)
        return out
    target_hidden = int(config.get("target_hidden_size") or d)
    vocab, draft_vocab = int(config["vocab_size"]), int(config.get("draft_vocab_size") or config["vocab_size"])
    out.update(
        {
            "fc.weight": (d, 3 * target_hidden),
            f"{prefix}input_layernorm.weight": (d,),
            f"{prefix}hidden_norm.weight": (d,),
            "norm.weight": (d,),
            "lm_head.weight": (draft_vocab, d),
            "d2t": (draft_vocab,),
            "t2d": (vocab,),
        }
    )
    return out


def dflash_shapes(config: dict) -> dict:
    """A DFlash draft's weights (models/dflash.py; the names vLLM's and SGLang's DFlash loaders
    read, the same in our checkpoint and in the engine folders): FC over the fused target layers,
    hidden_norm, Qwen3-style layers (q_norm/k_norm over head_dim), the final norm. The embedding
    and LM head are the target's."""
    d, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    kv, hd = int(config.get("num_key_value_heads") or heads), int(config.get("head_dim") or d // heads)
    inter, target = int(config["intermediate_size"]), int(config.get("target_hidden_size") or d)
    fused = (
        len(config["hidden_layers"]) if "hidden_layers" in config else len(config["dflash_config"]["target_layer_ids"])
    )
    out = {"fc.weight": (d, fused * target), "hidden_norm.weight": (d,), "norm.weight": (d,)}
    for i in range(int(config["num_hidden_layers"])):
        p = f"layers.{i}."
        out.update(
            {
                f"{p}input_layernorm.weight": (d,),
                f"{p}post_attention_layernorm.weight": (d,),
                f"{p}self_attn.q_proj.weight": (heads * hd, d),
                f"{p}self_attn.k_proj.weight": (kv * hd, d),
                f"{p}self_attn.v_proj.weight": (kv * hd, d),
                f"{p}self_attn.o_proj.weight": (d, heads * hd),
                f"{p}self_attn.q_norm.weight": (hd,),
                f"{p}self_attn.k_norm.weight": (hd,),
                f"{p}mlp.gate_proj.weight": (inter, d),
                f"{p}mlp.up_proj.weight": (inter, d),
                f"{p}mlp.down_proj.weight": (d, inter),
            }
        )
    return out


def write(ckpt: Checkpoint, out: pathlib.Path, *, num_speculative_tokens: int, verifier: str) -> dict:
    """Copy the loadable part of the checkpoint into `out` (an empty folder). -> notes for
    draftsmith_export.json."""
    for item in sorted(ckpt.path.iterdir()):
        if item.name in SKIPPED or item.name.startswith("."):
            continue
        if item.is_dir():
            shutil.copytree(item, out / item.name)
        else:
            shutil.copy2(item, out / item.name)
    if KINDS[ckpt.kind].causal_lm:
        serve = (
            "from transformers import AutoModelForCausalLM; "
            "draft = AutoModelForCausalLM.from_pretrained('DIR'); "
            f"target.generate(**inputs, assistant_model=draft, num_assistant_tokens={num_speculative_tokens})"
        )
    else:
        serve = f"draftsmith generate --draft DIR -k {num_speculative_tokens} PROMPT"
    return {"serve": serve}


def check(folder, kind: str) -> list[str]:
    """Problems with an hf export of a `kind` checkpoint ([] when it matches the contract)."""
    import json

    folder = pathlib.Path(folder)
    lay = layout(kind, "hf")
    required = lay.required_keys or (DRAFT_LM_REQUIRED_KEYS if KINDS[kind].causal_lm else ())
    problems = check_folder(folder, required, None)
    if problems:
        return problems
    config = json.loads((folder / "config.json").read_text())
    if lay.model_type and config.get("model_type") != lay.model_type:
        problems.append(f"model_type {config.get('model_type')!r}, expected {lay.model_type!r}")
    if not (folder / "drafter.json").is_file():
        problems.append("no drafter.json: draftsmith's loader would not recognise the folder")
    return problems + check_folder(folder, (), expected_weights(kind, config))


# Our own layouts (models/<kind>.py's weight names), one per kind; a kind without one (a new kind,
# or a plain causal LM) is checked only for its config.json and intact weights.
DRAFT_LM = Layout(required_keys=DRAFT_LM_REQUIRED_KEYS)
PARD = Layout(required_keys=(*DRAFT_LM_REQUIRED_KEYS, "pard_token"))
MEDUSA = Layout(required_keys=MEDUSA_REQUIRED_KEYS, shapes=medusa_shapes, model_type="draftsmith_medusa")
EAGLE = Layout(
    required_keys=EAGLE_REQUIRED_KEYS,
    shapes=lambda config: eagle_shapes(config, prefix="layers.0.", eagle3=False),
    model_type="draftsmith_eagle",
)
EAGLE3 = Layout(
    required_keys=EAGLE3_REQUIRED_KEYS,
    shapes=lambda config: eagle_shapes(config, prefix="midlayer.", eagle3=True),
    model_type="draftsmith_eagle3",
)
DFLASH = Layout(
    required_keys=(*EAGLE_REQUIRED_KEYS, "num_hidden_layers", "block_size", "mask_token_id", "target_hidden_size"),
    shapes=dflash_shapes,
    model_type="draftsmith_dflash",
)
