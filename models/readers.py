"""The target's feature readers alone: input embedding, final norm and LM head, nothing else.

A drafter trained from an offline feature cache (EAGLE, EAGLE-3, DFlash with `drafter.features:
DIR`) never runs the target's decoder layers: it reads cached hidden states and applies the
target's LM head to the cached last layer (its logits) and the embedding to the tokens. So the
trainer holds `2 x vocab x hidden` parameters of a 70B target (2.1B in bf16: 4.2 GB) instead of
141 GB (`model.target_parts: readers`; what `draftsmith plan` counts for an offline run).

The model is built from its config on the meta device; only the reader tensors are read from the
safetensors checkpoint (local folder, built-in or Hub id; the Hub downloads only the shards that
hold them). Anything that would run the decoder layers gets one clear error instead of a meta-
tensor failure deep inside torch.
"""

from __future__ import annotations

import json
import pathlib

import torch

from draftsmith.errors import DraftsmithError

from .sources import hub_errors, resolve_model

INDEX, SINGLE = "model.safetensors.index.json", "model.safetensors"


def reader_modules(model) -> dict[str, torch.nn.Module]:
    """The modules that read cached features, by role: embedding, norm (the final one) and head."""
    base = getattr(model, "model", None)
    found = {
        "embedding": model.get_input_embeddings(),
        "norm": getattr(base, "norm", None) or getattr(getattr(base, "language_model", None), "norm", None),
        "head": model.get_output_embeddings(),
    }
    missing = [role for role, m in found.items() if m is None]
    if missing:
        raise DraftsmithError(
            f"{type(model).__name__} has no {'/'.join(missing)} module draftsmith can find: load the whole "
            "target (model.target_parts: whole)"
        )
    return found


def reader_parameter_names(model) -> list[str]:
    """Checkpoint names of every reader parameter (a tied LM head is the embedding: listed once)."""
    wanted = {id(p) for m in reader_modules(model).values() for p in m.parameters()}
    return [name for name, p in model.named_parameters() if id(p) in wanted]


def _shard_files(name_or_path: str, names: list[str]) -> dict[str, list[str]]:
    """{local safetensors file: [tensor names in it]} for `names`, downloading only those shards."""
    src = resolve_model(name_or_path)
    folder = pathlib.Path(src.path)
    local = folder.is_dir()

    def fetch(filename: str) -> pathlib.Path | None:
        if local:
            path = folder / filename
            return path if path.is_file() else None
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        try:
            with hub_errors(src):
                return pathlib.Path(hf_hub_download(src.path, filename))
        except EntryNotFoundError:
            return None

    index = fetch(INDEX)
    if index is not None:
        weight_map = json.loads(index.read_text()).get("weight_map", {})
        absent = [n for n in names if n not in weight_map]
        if absent:
            raise DraftsmithError(
                f"{name_or_path}: {INDEX} lists no {', '.join(absent)}; the checkpoint's names differ from the "
                "model's: load the whole target (model.target_parts: whole)"
            )
        files: dict[str, list[str]] = {}
        for n in names:
            files.setdefault(weight_map[n], []).append(n)
        local_files = {}
        for f, ns in files.items():
            path = fetch(f)
            if path is None:
                raise DraftsmithError(f"{name_or_path}: {f}, named by {INDEX}, is missing")
            local_files[str(path)] = ns
        return local_files
    single = fetch(SINGLE)
    if single is None:
        raise DraftsmithError(
            f"{name_or_path}: neither {INDEX} nor {SINGLE}: the feature readers are read from safetensors "
            "checkpoints only; load the whole target (model.target_parts: whole)"
        )
    return {str(single): list(names)}


def _decoder_refused(*args, **kwargs):
    raise DraftsmithError(
        "this run loaded only the target's embedding, final norm and LM head (model.target_parts: readers): "
        "running the target (held-out evaluation, decoding, regeneration) needs model.target_parts: whole"
    )


def load_feature_readers(name_or_path: str, dtype: torch.dtype = torch.bfloat16, device="cpu"):
    """The target as an ``AutoModelForCausalLM`` whose embedding, final norm and LM head hold the
    checkpoint's weights on `device`; its decoder layers stay on the meta device (no memory) and
    its forward raises. `model.feature_readers_only` is True."""
    from safetensors import safe_open

    from .sources import meta_causal_lm

    model = meta_causal_lm(name_or_path, dtype)  # an unknown name: load_config's one line
    names = reader_parameter_names(model)
    params = dict(model.named_parameters())
    loaded: dict[int, torch.nn.Parameter] = {}
    for path, in_file in _shard_files(name_or_path, names).items():
        try:
            with safe_open(path, framework="pt") as f:
                for n in in_file:
                    if tuple(f.get_slice(n).get_shape()) != tuple(params[n].shape):
                        raise DraftsmithError(
                            f"{path}: {n} has shape {tuple(f.get_slice(n).get_shape())}, the config says "
                            f"{tuple(params[n].shape)}: the checkpoint and its config.json disagree"
                        )
                    t = f.get_tensor(n).to(device=device, dtype=dtype)
                    loaded[id(params[n])] = torch.nn.Parameter(t, requires_grad=False)
        except DraftsmithError:
            raise
        except Exception as e:  # noqa: BLE001 -- a truncated or foreign file
            raise DraftsmithError(
                f"{path}: cannot read the target's reader weights ({type(e).__name__}: {e})"
            ) from None
    # Put each loaded tensor everywhere its meta parameter sat: a tied head shares the embedding.
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is not None and id(p) in loaded:
                module._parameters[key] = loaded[id(p)]
    model.forward = _decoder_refused
    model.feature_readers_only = True
    return model.eval().requires_grad_(False)


__all__ = ["load_feature_readers", "reader_modules", "reader_parameter_names"]
