"""`extract`: the target run once over the training split, its features written as a cache
(train/features/cache.py's layout) shard by shard; resumable, and split over processes."""

from __future__ import annotations

import json
import math
import pathlib

from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.train.features.cache import (
    CACHE_DTYPES,
    MANIFEST,
    SETTINGS,
    _opened,
    _read_json,
    _refuse_different,
    _shard_name,
    _write_atomic,
    check_cache_folder,
    comparable,
    settings,
)
from draftsmith.train.features.online import check_layers, num_hidden_states, target_hidden_states


def extract(
    target,
    layers,
    train_rows,
    cache_dir,
    *,
    max_length: int,
    shard_rows: int = 64,
    accelerator=None,
    progress=True,
    batch_size: int = 4,
    dtype="bfloat16",
) -> dict:
    """Write the features of every training row into `cache_dir`; returns the manifest. Chunk i
    (rows [i*shard_rows, (i+1)*shard_rows)) is written by rank i % world; a rerun with the same
    settings skips the shards that exist, so a killed extraction resumes where it stopped."""
    out, layers = pathlib.Path(cache_dir), tuple(layers)
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    check_layers(layers, num_hidden_states(target.config), target.name)
    if dtype not in CACHE_DTYPES:
        raise DraftsmithError(f"feature cache dtype {dtype!r}: choose one of {', '.join(CACHE_DTYPES)}")
    if shard_rows < 1 or batch_size < 1:
        raise DraftsmithError(f"shard_rows ({shard_rows}) and batch_size ({batch_size}) must be >= 1")
    if train_rows.input_ids.shape[1] != max_length:
        raise DraftsmithError(f"training rows have {train_rows.input_ids.shape[1]} tokens, max_length is {max_length}")
    want = settings(target, layers, max_length, train_rows, dtype) | {"shard_rows": shard_rows}
    # Every rank checks (and fails) alike, so none is left waiting at the barrier below.
    check_cache_folder(out)
    have = _read_json(out / SETTINGS) if (out / SETTINGS).exists() else None
    if have is not None:
        _refuse_different(
            out, have, comparable(have, want), "pass another --output folder, or delete this one to re-extract"
        )
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        for tmp in out.glob("*.tmp"):  # a shard a killed run was writing
            tmp.unlink()
        if have is None:
            _write_atomic(out / SETTINGS, lambda tmp: tmp.write_text(json.dumps(want, indent=2)))
    _barrier(accelerator)

    n = len(train_rows)
    mine = [(i, i * shard_rows, min(n, (i + 1) * shard_rows)) for i in range(rank, math.ceil(n / shard_rows), world)]
    todo = [c for c in mine if not (out / _shard_name(c[0])).exists()]
    total = sum(hi - lo for _, lo, hi in mine)
    bar = tqdm(
        total=total,
        initial=total - sum(hi - lo for _, lo, hi in todo),
        unit="row",
        dynamic_ncols=True,
        desc=f"features (rank 0 of {world})" if world > 1 else "features",
        disable=not (progress and rank == 0),
    )
    for i, lo, hi in todo:
        tensors = {}
        for start in range(lo, hi, batch_size):
            end = min(hi, start + batch_size)
            ids = train_rows.input_ids[start:end].long().to(target.device)
            mask = train_rows.attention_mask[start:end].long().to(target.device)
            positions = train_rows.position_ids[start:end].long().to(target.device)  # per conversation
            hidden = target_hidden_states(target.model, ids, mask, layers, name=target.name, position_ids=positions)
            hidden = hidden.hidden
            hidden = hidden.to(CACHE_DTYPES[dtype]).cpu()
            for j, length in enumerate(mask.sum(dim=1).tolist()):  # rows are right-padded: keep real tokens
                tensors[f"row.{start + j}"] = hidden[j, :length].clone()  # own storage: safetensors refuses shared
            bar.update(end - start)
        _write_shard(out / _shard_name(i), tensors, {"rank": str(rank), "rows": f"{lo}-{hi}"})
    bar.close()
    _barrier(accelerator)
    # Every rank checks the joined shards (headers only); rank 0 writes the manifest.
    manifest = want | _survey(out, train_rows, shard_rows)
    if rank == 0:
        _write_atomic(out / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
    _barrier(accelerator)
    return manifest


def _survey(out: pathlib.Path, train_rows, shard_rows: int) -> dict:
    """Counts and shard ranges, after checking that every row is stored whole, in the one shard
    its index says (readers locate rows by the ranges, so no row can be there twice)."""
    n, lengths = len(train_rows), train_rows.attention_mask.sum(dim=1).tolist()
    seen, shards, num_bytes = set(), [], 0
    for path in sorted(out.glob("shard-[0-9]*.safetensors")):
        i = int(path.name[len("shard-") : -len(".safetensors")])
        lo, hi = i * shard_rows, min(n, (i + 1) * shard_rows)
        with _opened(path) as f:
            for key in f.keys():
                r = int(key.removeprefix("row.")) if key.removeprefix("row.").isdigit() else -1
                if not lo <= r < hi or f.get_slice(key).get_shape()[0] != lengths[r]:
                    raise DraftsmithError(
                        f"{path}: {key} does not belong there for this dataset; delete {out} and re-extract"
                    )
                seen.add(r)
        shards.append({"file": path.name, "rows": [lo, hi]})
        num_bytes += path.stat().st_size
    missing = sorted(set(range(n)) - seen)
    if missing:
        raise DraftsmithError(
            f"feature cache {out}: {len(missing)} rows missing (first {missing[:5]}): rerun the extraction"
        )
    return {"num_rows": n, "num_tokens": int(sum(lengths)), "bytes": num_bytes, "shards": shards}


def _write_shard(path: pathlib.Path, tensors: dict, metadata: dict) -> None:
    from safetensors.torch import save_file

    _write_atomic(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


def _barrier(accelerator) -> None:
    if accelerator is not None:
        accelerator.wait_for_everyone()
