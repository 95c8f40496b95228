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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import KINDS
from draftsmith.shipping.export.common import CROSSCHECK_RECORD, TRAINING_ONLY, Layout, check_folder, layout
from draftsmith.shipping.export.format import Format, late

if TYPE_CHECKING:
    from draftsmith.models.checkpoint import Checkpoint

ENGINE = "transformers"
CHECKED_AGAINST = (
    "transformers 5.x (AutoModelForCausalLM.from_pretrained, GenerationMixin.generate(assistant_model=...))"
)

# Training artefacts left out of every hf export (LoRA adapters: their merge is in the weights), and
# the cross-check record, which speaks of the checkpoint's engine exports, not of this folder.
SKIPPED = (*TRAINING_ONLY, "adapter", "target_adapter", CROSSCHECK_RECORD)


@dataclass(frozen=True)
class HfLayout(Layout):
    """A kind's own checkpoint layout: the config.json keys our loader needs, the weights' shapes
    (exported config -> {name: shape}; None: any causal LM, transformers checks it) and the
    config's model_type."""

    required_keys: tuple[str, ...] = ()
    shapes: object = None
    model_type: str | None = None


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


def expected_weights(kind: str, config: dict) -> dict | None:
    """Name -> shape of the weights our loader reads for `config`; None for a causal-LM kind
    (whatever LM it is: transformers checks it)."""
    shapes = layout(kind, "hf").shapes
    return shapes(config) if shapes else None


def eagle_shapes(config: dict, prefix: str, eagle3: bool) -> dict:
    """Shapes of an EAGLE draft's weights from a config holding the Llama layer fields (an
    engine's: vLLM and SGLang read our weight names, so their contracts state them here): the decoder layer's q/k/v
    read 2d in EAGLE-3 (embedding ⊕ hidden)."""
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


def check_complete(ckpt: Checkpoint) -> None:
    """What an export or upload reads or copies is there and whole: config.json, and every
    safetensors file (headers only), so a truncated model.safetensors is one clear error before
    anything is written."""
    from draftsmith.models.sources import require_config
    from draftsmith.models.weights import check_weights

    require_config(ckpt.path)
    check_weights(ckpt.path, skip=TRAINING_ONLY)
    check_intact(ckpt)


def check_intact(ckpt: Checkpoint) -> None:
    """The checkpoint agrees with itself: config.json and the weights match our own layout (hf's
    contract: e.g. as many Medusa heads in the weights as config.json declares), and a folder
    drafter.json names (Medusa-2's fine-tuned target/) is there. A mismatch is a damaged
    checkpoint, named as such, before any export reads it (not a KeyError halfway through)."""
    problems = [p for p in check(ckpt.path, ckpt.kind) if not p.startswith("no drafter.json")]
    sub = ckpt.meta.get("target_path")
    if sub and not (ckpt.path / sub / "config.json").is_file():
        problems.append(f"its fine-tuned target {sub}/ (drafter.json's target_path) is missing or incomplete")
    if problems:
        raise DraftsmithError(
            f"checkpoint {ckpt.path} is damaged: {'; '.join(problems)}; copy the whole folder again or retrain it"
        )


def _model_shapes(ref: str):
    """Shapes of our own layout, read off the model class `ref` ("module:Class") on the meta
    device (models/weights.py's checkpoint_shapes): the models define it, this file does not."""

    def shapes(config: dict) -> dict:
        from draftsmith.kinds import resolve
        from draftsmith.models.weights import checkpoint_shapes

        return checkpoint_shapes(resolve(ref), config)

    return shapes


# Our own layouts, one per kind; a kind without one (a new kind, or a plain causal LM) is checked
# only for its config.json and intact weights.
DRAFT_LM = HfLayout(required_keys=DRAFT_LM_REQUIRED_KEYS)
PARD = HfLayout(required_keys=(*DRAFT_LM_REQUIRED_KEYS, "pard_token"))
MEDUSA = HfLayout(
    required_keys=MEDUSA_REQUIRED_KEYS,
    shapes=_model_shapes("draftsmith.models.medusa:MedusaHeads"),
    model_type="draftsmith_medusa",
)
EAGLE = HfLayout(
    required_keys=EAGLE_REQUIRED_KEYS,
    shapes=_model_shapes("draftsmith.models.eagle:EagleModel"),
    model_type="draftsmith_eagle",
)
EAGLE3 = HfLayout(
    required_keys=EAGLE3_REQUIRED_KEYS,
    shapes=_model_shapes("draftsmith.models.eagle3:Eagle3Model"),
    model_type="draftsmith_eagle3",
)
DFLASH = HfLayout(
    required_keys=(*EAGLE_REQUIRED_KEYS, "num_hidden_layers", "block_size", "mask_token_id", "target_hidden_size"),
    shapes=_model_shapes("draftsmith.models.dflash:DFlashModel"),
    model_type="draftsmith_dflash",
)

FORMAT = Format(
    name="hf",
    engine=ENGINE,
    help="transformers / draftsmith's loader",
    layout_type=HfLayout,
    write=late(write),
    check=late(check),
    checked_against=CHECKED_AGAINST,
    staged=False,  # publish uploads the checkpoint itself as the repo's root
    serve_names_target=False,  # its usage line names no target folder
)
