"""DFlash's export in the layout vLLM loads (and SGLang reads the same folder): a Qwen3-style config
with `dflash_config`, the draft's own layers, the target's embeddings and LM head shared by the
engine. draftsmith/shipping/export/vllm.py names it among the kinds' layouts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_json
from draftsmith.shipping.export import hf
from draftsmith.shipping.export.common import dtype_name, llama_layer_config, save_weights, target_config

if TYPE_CHECKING:
    import pathlib

    from draftsmith.models.checkpoint import Checkpoint

# --- dflash: vLLM's DFlashDraftModel (model_executor/models/qwen3_dflash.py) -------------------------
# A Qwen3-style config (model_type qwen3, so AutoConfig builds it) whose dflash_config names the
# target layers in DFlash's convention (decoder-layer outputs from 0: our hidden_states index - 1;
# vLLM adds the 1 back, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py) and the mask token (the
# ids of the K masked query slots, v1/spec_decode/dflash.py). No embed_tokens / lm_head: vLLM
# shares the target's when a checkpoint lacks them (llm_base_proposer.py _maybe_share_*). SGLang
# (srt/models/dflash.py + srt/speculative/dflash_utils.py) reads the same folder.
DFLASH_REQUIRED_KEYS = (
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
    "block_size",
    "num_target_layers",
    "target_hidden_size",
    "layer_types",
    "dflash_config",
)
DFLASH_CONFIG_KEYS = ("target_layer_ids", "mask_token_id", "causal")
DFLASH_ARCHITECTURE = "DFlashDraftModel"  # registry.py -> qwen3_dflash.DFlashQwen3ForCausalLM


def dflash_folder(ckpt: Checkpoint, out: pathlib.Path, k: int, verifier: str) -> dict:
    """The DFlash layout vLLM and SGLang load: our weight names are theirs (fc, hidden_norm,
    layers.*, norm); FC's column blocks go in ascending layer order, the order engines capture
    the target's layers in whatever order the ids are listed."""
    import torch

    cfg = ckpt.config
    block = int(cfg["block_size"])
    if k > block - 1:
        raise DraftsmithError(f"this dflash draft fills blocks of {block}: -k {k} is more than its {block - 1} masks")
    target_cfg = target_config(ckpt.target_name) or {}
    num_layers = target_cfg.get("num_hidden_layers")
    layers = [int(i) for i in cfg["hidden_layers"]]
    if num_layers is not None and any(not 1 <= i <= num_layers - 1 for i in layers):
        raise DraftsmithError(
            f"this dflash draft reads hidden states {layers}; engines hand a drafter the outputs of "
            f"decoder layers 0..{num_layers - 2} only (hidden states 1..{num_layers - 1})"
        )
    if len(set(layers)) != len(layers):
        raise DraftsmithError(
            f"this dflash draft reads the same target layer twice {layers}; engines capture each once"
        )
    w = ckpt.weights()
    tensors = {n: w[n] for n in hf.dflash_shapes(cfg)}
    order = sorted(range(len(layers)), key=lambda j: layers[j])
    if order != list(range(len(layers))):
        blocks = tensors["fc.weight"].chunk(len(layers), dim=1)
        tensors["fc.weight"] = torch.cat([blocks[j] for j in order], dim=1)
    save_weights(tensors, out)
    dtype = dtype_name(tensors)
    layer = llama_layer_config(cfg, vocab_size=int(cfg["vocab_size"]), dtype=dtype)
    n = int(cfg["num_hidden_layers"])
    write_json(
        out / "config.json",
        {
            **layer,
            "architectures": [DFLASH_ARCHITECTURE],
            "model_type": "qwen3",  # the draft's layers are Qwen3's (q_norm, k_norm), whatever the target's family
            "num_hidden_layers": n,
            "layer_types": ["full_attention"] * n,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": n,
            "block_size": block,
            "num_target_layers": int(num_layers) if num_layers is not None else None,
            "target_hidden_size": int(cfg.get("target_hidden_size") or cfg["hidden_size"]),
            "dflash_config": {
                "target_layer_ids": [i - 1 for i in sorted(layers)],
                "mask_token_id": int(cfg["mask_token_id"]),
                "causal": bool(cfg.get("causal", False)),
            },
        },
    )
    return {"k": k, "target_layer_ids": [i - 1 for i in sorted(layers)]}


def _check_dflash(config: dict) -> list[str]:
    problems = [
        f"dflash_config lacks {k!r}" for k in DFLASH_CONFIG_KEYS if k not in (config.get("dflash_config") or {})
    ]
    if problems:
        return problems
    dc, n = config["dflash_config"], config.get("num_hidden_layers")
    if config.get("architectures") != [DFLASH_ARCHITECTURE]:
        problems.append(f"architectures must be [{DFLASH_ARCHITECTURE!r}] (vLLM's registry name)")
    if len(config.get("layer_types") or []) != n:
        problems.append("layer_types must have one entry per draft layer (vLLM and SGLang resolve attention per layer)")
    ids, L = dc["target_layer_ids"], config.get("num_target_layers")
    if not ids or ids != sorted(set(ids)) or (L is not None and not 0 <= ids[0] <= ids[-1] <= L - 2):
        problems.append(
            f"dflash_config.target_layer_ids {ids} must be distinct, ascending decoder-layer outputs 0..L-2"
        )
    if not isinstance(dc["mask_token_id"], int) or not 0 <= dc["mask_token_id"] < int(config["vocab_size"]):
        problems.append(f"dflash_config.mask_token_id {dc['mask_token_id']!r} must be an id in the vocabulary")
    if int(config["block_size"]) < 2:
        problems.append("block_size must be >= 2 (the pending token + masks)")
    return problems
