"""What every export format shares: the target's facts, writing weights, checking a folder.

A format's `write` is handed the checkpoint opened once by its caller (models/checkpoint.py's
`Checkpoint`: drafter.json, config.json, weights and tokenizer files). Kept free of torch at
import time (the CLI's `--help` stays fast); tensors are read and written with safetensors inside
the functions that need them.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from draftsmith.errors import DraftsmithError

if TYPE_CHECKING:
    from draftsmith.models.checkpoint import Checkpoint

WEIGHTS_NAME = "model.safetensors"  # as in models/weights.py (not imported here: it would load torch)
# What the trainer leaves in a step-* folder that no engine (and no published repo) wants.
TRAINING_ONLY = ("training_state", "trainer_state.json")
# What `draftsmith crosscheck` writes into a checkpoint it passed: the engines that decoded its exports.
CROSSCHECK_RECORD = "crosscheck.json"


@dataclass(frozen=True)
class Layout:
    """One kind's layout in one export format: the base of each format's own layout type
    (hf.HfLayout, vllm.VllmLayout, sglang.SglangLayout, gguf.GgufLayout), which holds only the
    fields that format reads. A kind names its layouts in draftsmith/kinds.py (`Kind.exports`),
    so each format module holds one such object per kind it has, not a table keyed by kind names.
    """


def layout(kind: str, fmt: str) -> Layout:
    """The kind's layout for `fmt` (the format's empty layout where the kind declares the format
    without one of its own: "hf" for a new kind is its checkpoint as it is)."""
    from draftsmith.shipping.export.format import get_format

    return get_format(fmt).layout(kind)


def article(word: str) -> str:
    """ "an eagle", "a medusa": kind names in messages."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def weight_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """model.safetensors or the shards its index names (models/weights.py: the one helper)."""
    from draftsmith.models.weights import weight_files

    return weight_files(folder)


def weight_shapes(folder) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in a folder's safetensors files (headers only)."""
    from safetensors import safe_open

    out = {}
    for f in weight_files(pathlib.Path(folder)):
        with safe_open(str(f), "pt") as h:
            for name in h.keys():
                out[name] = tuple(h.get_slice(name).get_shape())
    return out


def save_weights(tensors: dict, folder: pathlib.Path) -> None:
    """One safetensors file, contiguous tensors, the `format: pt` metadata transformers expects."""
    from safetensors.torch import save_file

    path = folder / WEIGHTS_NAME
    try:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 -- safetensors reports a failed write as its own error, "(os error 28)"
        code = re.search(r"os error (\d+)|Os \{ code: (\d+)", str(e))  # Rust's io::Error, shown or debugged
        if code is None:
            raise
        number = int(code.group(1) or code.group(2))
        raise OSError(number, os.strerror(number), str(path)) from e


def copy_tokenizer(ckpt: Checkpoint, out: pathlib.Path) -> list[str]:
    names = []
    for f in ckpt.tokenizer_files():
        shutil.copy2(f, out / f.name)
        names.append(f.name)
    return names


def dtype_name(tensors: dict) -> str:
    """The floating dtype of the weights (config.json's torch_dtype)."""
    import torch

    for t in tensors.values():
        if t.is_floating_point():
            return str(t.dtype).removeprefix("torch.")
    return str(torch.float32).removeprefix("torch.")


# --- the target ---------------------------------------------------------------------------------


def hub_id(target_name: str | None) -> str | None:
    """The Hugging Face Hub id of a target: built-in names map to their upstream repos
    (tiny-random has none), a Hub id is itself, a local folder or file has none."""
    if not target_name:
        return None
    from draftsmith.models.sources import BUILTINS

    name = str(target_name)
    if name in BUILTINS:
        return BUILTINS[name].hub_id
    if pathlib.Path(name).expanduser().exists() or name.startswith(("/", ".", "~")) or name.lower().endswith(".gguf"):
        return None
    return name if re.fullmatch(r"[\w.-]+/[\w.-]+", name) else None


def target_config(target_name: str) -> dict | None:
    """The target's config.json as a dict, if it can be had without a download (a built-in
    builds or converts on first use, as training did); None otherwise."""
    from draftsmith.models.sources import resolve_model

    try:
        src = resolve_model(target_name)
    except DraftsmithError:
        return None
    folder = pathlib.Path(src.path)
    if folder.is_dir():
        cfg = folder / "config.json"
        try:
            return json.loads(cfg.read_text()) if cfg.is_file() else None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return None
    try:  # a Hub id: only what the local cache already holds
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(src.path, local_files_only=True).to_dict()
    except Exception:  # noqa: BLE001 -- not cached, offline, unknown architecture: no facts
        return None


def target_lm_head(target_name: str):
    """The target's output embedding [vocab, hidden] (for heads that share it, e.g. Medusa's
    share_lm_head, which an engine cannot borrow)."""
    from draftsmith.models.sources import load_causal_lm

    model = load_causal_lm(target_name)
    return model.get_output_embeddings().weight.detach().cpu()


def rope_fields(rope_parameters: dict | None) -> dict:
    """RoPE in both spellings: `rope_theta` + `rope_scaling` (transformers 4, what SGLang and older
    vLLM read) and `rope_parameters` (transformers 5)."""
    rope = dict(rope_parameters or {"rope_type": "default", "rope_theta": 10000.0})
    theta = float(rope.get("rope_theta", 10000.0))
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    if scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return {"rope_theta": theta, "rope_scaling": scaling, "rope_parameters": {**rope, "rope_theta": theta}}


def llama_layer_config(cfg: dict, *, vocab_size: int, dtype: str) -> dict:
    """A full one-layer LlamaConfig (as a dict) for an EAGLE draft's decoder layer: what vLLM's
    and SGLang's Llama-style EAGLE models build their layer from."""
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(vocab_size),
        "hidden_size": hidden,
        "intermediate_size": int(cfg["intermediate_size"]),
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": int(cfg.get("num_key_value_heads") or heads),
        "head_dim": int(cfg.get("head_dim") or hidden // heads),
        "hidden_act": cfg.get("hidden_act", "silu"),
        "rms_norm_eps": float(cfg.get("rms_norm_eps", 1e-6)),
        "max_position_embeddings": int(cfg.get("max_position_embeddings", 2048)),
        **rope_fields(cfg.get("rope_parameters")),
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,  # SGLang's EAGLE-3 uses the embedding as LM head when true
        "torch_dtype": dtype,
    }


def normalise_layers(layers, num_layers: int | None, what: str) -> list[int]:
    """Indices into transformers' hidden_states (negative from the end) -> non-negative ones."""
    out = []
    for i in layers:
        i = int(i)
        if i < 0:
            if num_layers is None:
                raise DraftsmithError(
                    f"{what}: reads hidden layer {i} (counted from the end), and the target's "
                    "layer count could not be read to turn it into an engine layer id"
                )
            i += num_layers + 1
        out.append(i)
    return out


# --- checking an exported folder against a contract ----------------------------------------------


def check_folder(folder, required_keys, expected_weights: dict | None, forbidden_keys=()) -> list[str]:
    """Problems with an exported folder: missing or forbidden config keys, weight names that
    differ from the contract's, shapes that differ. [] when it matches."""
    folder = pathlib.Path(folder)
    problems = []
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        return [f"config.json: unreadable ({e})"]
    missing = [k for k in required_keys if k not in config]
    if missing:
        problems.append(f"config.json lacks {missing}")
    present = [k for k in forbidden_keys if k in config]
    if present:
        problems.append(f"config.json must not have {present}")
    if expected_weights is not None:
        shapes = weight_shapes(folder)
        extra, absent = sorted(set(shapes) - set(expected_weights)), sorted(set(expected_weights) - set(shapes))
        if extra:
            problems.append(f"unexpected weights {extra[:8]}")
        if absent:
            problems.append(f"missing weights {absent[:8]}")
        wrong = [
            f"{n}: {shapes[n]} != {tuple(s)}"
            for n, s in expected_weights.items()
            if n in shapes and tuple(shapes[n]) != tuple(s)
        ]
        if wrong:
            problems.append("wrong shapes: " + "; ".join(wrong[:8]))
    return problems
