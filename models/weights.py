"""A drafter's weights: which safetensors files they are, whether each is whole, and loading
the drafters that hold only their own weights (Medusa heads, EAGLE-family drafts).

One helper for every place that reads, copies or uploads a checkpoint's weights (the trainer's
checkpoint verification, `draftsmith export`, `draftsmith publish`): a header check costs a
few kB of reads, so a truncated file is named before anything is written from it.
"""

from __future__ import annotations

import json
import pathlib

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import first_line

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
_DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
    "C64": 8,
}
_MAX_HEADER = 100_000_000  # safetensors' own limit on the JSON header


def weight_files(folder) -> list[pathlib.Path]:
    """The safetensors files of a model folder: model.safetensors, or the shards its index names."""
    folder = pathlib.Path(folder)
    if (folder / WEIGHTS_NAME).is_file():
        return [folder / WEIGHTS_NAME]
    index = folder / WEIGHTS_INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
            raise DraftsmithError(f"{index}: corrupt weight index ({type(e).__name__}: {first_line(e)})") from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise DraftsmithError(
                f"{folder}: weight shard(s) {', '.join(missing[:3])} named in {WEIGHTS_INDEX} are "
                "missing; the checkpoint is incomplete: copy the whole folder"
            )
        return [folder / n for n in names]
    raise DraftsmithError(f"{folder}: no weights ({WEIGHTS_NAME} or {WEIGHTS_INDEX}); the checkpoint is incomplete")


def check_safetensors(path) -> None:
    """A DraftsmithError naming `path` unless its header parses and every tensor's bytes lie
    inside the file with the size its dtype and shape need. Reads the header only (a truncated
    copy -- an interrupted download or disk-full write -- fails here instead of being exported
    or uploaded). Format: https://github.com/huggingface/safetensors#format (8-byte
    little-endian header length, JSON header, then the data; offsets relative to the data)."""
    path = pathlib.Path(path)

    def bad(why: str) -> DraftsmithError:
        return DraftsmithError(f"{path} is damaged: {why}; copy it again, or use another checkpoint")

    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise bad(f"{size} bytes, shorter than a safetensors header")
            n = int.from_bytes(head, "little")
            if n > min(size - 8, _MAX_HEADER):
                raise bad(f"truncated or not safetensors ({size} bytes, the header alone claims {n})")
            raw = f.read(n)
    except OSError as e:
        raise DraftsmithError(f"{path}: could not be read ({e.strerror or e})") from None
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError):
        raise bad("its header is not valid JSON (not a safetensors file?)") from None
    data_len, need = size - 8 - n, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in info["data_offsets"])
            shape, dtype = [int(d) for d in info["shape"]], str(info["dtype"])
        except (KeyError, TypeError, ValueError):
            raise bad(f"tensor {name!r} has a malformed header entry") from None
        count = 1
        for d in shape:
            count *= d
        if not 0 <= begin <= end or (dtype in _DTYPE_BYTES and end - begin != count * _DTYPE_BYTES[dtype]):
            raise bad(f"tensor {name!r} ({dtype} {shape}) has byte range [{begin}, {end}) of the wrong size")
        need = max(need, end)
    if need > data_len:
        raise bad(f"truncated: {size} bytes, its tensors need {8 + n + need}")


def check_weights(folder, skip: tuple[str, ...] = ()) -> list[pathlib.Path]:
    """Check the model weights of `folder` (weight_files) and every other *.safetensors below it
    (but under the names in `skip`, and dot-folders) with check_safetensors. -> the files checked."""
    folder = pathlib.Path(folder)
    files = weight_files(folder)
    others = [
        p
        for p in sorted(folder.rglob("*.safetensors"))
        if p not in files and not any(part in skip or part.startswith(".") for part in p.relative_to(folder).parts)
    ]
    for f in files + others:
        check_safetensors(f)
    return files + others


def checkpoint_shapes(model_class, config: dict) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor `model_class` (a drafter's PreTrainedModel) saves for
    `config` (its config.json), read off the model itself built on the meta device: no memory, no
    weights. Our own checkpoint layout is defined once, by the model classes; the hf export's
    contract and the checkpoint checks read it from here instead of a hand-written copy."""
    import torch

    known = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version")}
    with torch.device("meta"):
        model = model_class(model_class.config_class(**known))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


# --- drafters that hold only their own weights (Medusa heads, EAGLE-family drafts) ----------------


def load_draft_weights(model_class, folder, target, what: str, check=None):
    """`model_class.from_pretrained(folder)` in the target's dtype, with one clear error for a
    missing/damaged config or weights, missing tensors, or a tokenizer other than the target's.
    `check(config)` runs on the config first (sizes, layers), so a mismatch is named before any
    weights load. `what` names the checkpoint in messages ("medusa heads in X")."""
    from .sources import check_same_tokenizer, load_tokenizer, require_config

    folder = pathlib.Path(folder)
    require_config(folder)
    try:
        config = model_class.config_class.from_pretrained(folder)
    except Exception as e:  # noqa: BLE001 -- a missing or damaged config.json
        raise DraftsmithError(f"{what}: could not read config.json ({type(e).__name__}: {first_line(e)})") from e
    if check is not None:
        check(config)
    if (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file():
        check_same_tokenizer(load_tokenizer(str(folder)), target.tokenizer, str(folder), target.name)
    try:
        model, info = model_class.from_pretrained(folder, dtype=target.dtype, output_loading_info=True)
    except DraftsmithError:
        raise
    except Exception as e:  # noqa: BLE001 -- corrupt weights raise safetensors' own error type, among others
        raise DraftsmithError(f"{what}: could not load the weights ({type(e).__name__}: {first_line(e)})") from e
    if info.get("missing_keys"):
        raise DraftsmithError(f"{what}: weights missing from the checkpoint: {sorted(info['missing_keys'])[:5]}")
    return model.to(target.device)


def check_draft_sizes(config, target, what: str) -> None:
    """A draft that reads the target's hidden states must match its hidden and vocabulary sizes."""
    for name, have, want in (
        ("hidden size", config.hidden_size, target.config.hidden_size),
        ("vocabulary size", config.vocab_size, target.vocab_size),
    ):
        if have != want:
            raise DraftsmithError(f"{what}: trained for {name} {have}, the target {target.name} has {want}")


def register_config(config_class) -> None:
    """AutoConfig.from_pretrained then reads our own drafter folders too."""
    from transformers import AutoConfig

    try:
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    except (TypeError, ValueError):  # older transformers without exist_ok
        pass
