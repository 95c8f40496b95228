"""The frozen target's hidden states ("features") that EAGLE drafters read, online or from a cache.

Online (the default): the target runs under no_grad in the training process, every step.
Offline: `extract` runs it once over the training split and writes a cache that training reads
back (`OfflineFeatures`), so the target's forward is paid once however many epochs follow:

    DIR/settings.json                 what the cache is for; written first, a rerun must match it
    DIR/shard-00000.safetensors       rows [0, shard_rows): one tensor "row.<i>" per row,
                                      [real tokens, len(layers) * d] in bf16, nothing else
    DIR/shard-00000.safetensors.tmp   a shard being written; deleted by the next run
    DIR/manifest.json                 written last: settings + counts + shard row ranges

Token ids, masks and logits are not stored: ids come from the data pipeline (guarded by the
dataset fingerprint), logits are the LM head applied to the stored last layer on the fly.

    accelerate launch -m draftsmith.train.features RECIPE --output DIR [--shard-rows N] [--a.b=value ...]
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import fnmatch
import hashlib
import inspect
import json
import logging
import math
import os
import pathlib
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import io_error as _io_error
from draftsmith.train.distributed import fingerprint
from draftsmith.train.losses import head_on_rows

log = logging.getLogger(__name__)

FORMAT = 2  # bump when the shard layout changes: older caches are then refused, not misread
SETTINGS, MANIFEST = "settings.json", "manifest.json"
OPEN_SHARDS = 4  # safe_open handles kept: a shuffled epoch hops between shards
CACHE_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass
class Features:
    hidden: torch.Tensor  # [B, T, len(layers) * d], target dtype, the layers in the order asked for
    logits: torch.Tensor | None = None  # [B, T, V], target dtype, when asked for; [N, V] with logit_rows
    logit_index: torch.Tensor | None = None  # with logit_rows: [B, T] long, (b, t) -> its row of logits (-1: none)


def row_index(rows: torch.Tensor) -> torch.Tensor:
    """[B, T] bool -> [B, T] long: the index of each selected position among the selected, -1 elsewhere."""
    return torch.where(rows, rows.flatten().cumsum(0).view(rows.shape) - 1, -1)


def num_hidden_states(config) -> int:
    return config.get_text_config().num_hidden_layers + 1  # embeddings + one per decoder layer


# What a cache folder holds (vLLM's staging folder and log included): anything else in a folder
# without settings.json means it is not a feature cache.
CACHE_ENTRIES = (SETTINGS, MANIFEST, "shard-*.safetensors", "*.tmp", "vllm", "vllm.log")


def check_cache_folder(out, flag: str = "feature cache folder") -> None:
    """A folder to write a cache into: new, empty, or a feature cache (a rerun resumes it when its
    settings match). Another folder is refused: a typo'd path must not fill it with shards."""
    out = pathlib.Path(out)
    if not out.is_dir() or (out / SETTINGS).exists():
        return
    foreign = sorted(p.name for p in out.iterdir() if not any(fnmatch.fnmatch(p.name, e) for e in CACHE_ENTRIES))
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise DraftsmithError(
            f"{flag} {out} holds other files ({shown}) and is not a feature cache: name a new or empty folder"
        )


def check_distinct_layers(layers, n_states: int) -> None:
    """Each hidden state once: an index listed twice, or a negative one naming a listed state,
    would store the same features twice under two places of the drafter's input."""
    seen = {}
    for layer in layers:
        state = layer % n_states
        if state in seen:
            same = "" if seen[state] == layer else f" ({seen[state]} and {layer} are both hidden state {state})"
            raise DraftsmithError(f"--layers lists hidden state {layer} twice{same}: give each index once")
        seen[state] = layer


def check_layers(layers, n_states: int, name: str) -> None:
    if not layers:
        raise DraftsmithError("the drafter reads no hidden layers: give at least one index")
    for layer in layers:
        if isinstance(layer, bool) or not isinstance(layer, int) or not -n_states <= layer < n_states:
            raise DraftsmithError(
                f"the drafter reads hidden layer {layer} but {name} has {n_states} hidden "
                f"states (indices {-n_states}..{n_states - 1})"
            )


# no_grad, not inference_mode: the features feed a drafter whose forward autograd records, and
# inference tensors cannot be saved for backward.
@torch.no_grad()
def target_hidden_states(
    target_model, input_ids, attention_mask, layers, want_logits=False, name=None, logit_rows=None
) -> Features:
    """Entries `layers` of transformers' `hidden_states` tuple (0: embeddings, i: the input of
    decoder layer i, -1: the last layer after the final norm = the LM head's input), concatenated.
    logit_rows ([B, T] bool): the LM head runs on those positions only (logits [N, V])."""
    extra = {}
    if not want_logits and "logits_to_keep" in inspect.signature(target_model.forward).parameters:
        extra["logits_to_keep"] = 1  # skip the [B, T, V] LM head nobody reads
    rows = (
        head_on_rows(target_model, logit_rows) if want_logits and logit_rows is not None else contextlib.nullcontext()
    )
    with rows:
        out = target_model(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, use_cache=False, **extra
        )
    states = out.hidden_states
    check_layers(tuple(layers), len(states), name or target_model.config.name_or_path)
    hidden = torch.cat([states[i] for i in layers], dim=-1)
    if not want_logits:
        return Features(hidden)
    if logit_rows is None:
        return Features(hidden, out.logits)
    return Features(hidden, out.logits[0], row_index(logit_rows))


class OnlineFeatures:
    """Features computed by the target in the training process, every step."""

    def __init__(self, target, layers: tuple[int, ...]):
        self.target, self.layers = target, tuple(layers)
        check_layers(self.layers, num_hidden_states(target.config), target.name)

    def __call__(self, batch: dict, want_logits: bool = False, logit_rows=None) -> Features:
        return target_hidden_states(
            self.target.model,
            batch["input_ids"],
            batch["attention_mask"],
            self.layers,
            want_logits,
            name=self.target.name,
            logit_rows=logit_rows,
        )


# --- what a cache is for -------------------------------------------------------------------------


def settings(target, layers, max_length, train_rows, dtype="bfloat16") -> dict:
    """Everything that decides a cache's content: a cache is used only by a run with equal settings.

    The target's identity: the source's revision where it names one, else a hash of the weights
    every run holds (embedding, final norm, LM head: a readers-only target has no others), plus,
    when this process holds the whole target, a hash of all its weights ("weights"), compared only
    where both the cache and the run have it."""
    keys = {
        "format": FORMAT,
        "target": target.name,
        "revision": _revision(target),
        "target_dtype": str(target.dtype).removeprefix("torch."),
        "layers": list(layers),
        "hidden_size": target.config.get_text_config().hidden_size,
        "dtype": dtype,
        "max_length": max_length,
        "dataset_fingerprint": dataset_fingerprint(train_rows),
    }
    if not _source_revision(target) and getattr(target, "parts", "whole") == "whole":
        keys["weights"] = f"params:{fingerprint(target.model)}"
    return keys


def _source_revision(target) -> str | None:
    for attr in ("revision", "commit", "digest", "sha256"):
        value = getattr(target.source, attr, None)
        if value:
            return f"{attr}:{value}"
    return None


def _revision(target) -> str:
    """The source's own revision when it names one, else a hash of the feature readers' weights."""
    from draftsmith.models.readers import reader_modules

    named = _source_revision(target)
    if named:
        return named
    readers = reader_modules(target.model).items()
    return f"readers:{fingerprint((f'{role}.{n}', p) for role, m in readers for n, p in m.named_parameters())}"


def comparable(have: dict, want: dict) -> dict:
    """`want` without the keys one side could not compute (the whole-weights hash of a readers-only run)."""
    return {k: v for k, v in want.items() if k != "weights" or "weights" in have}


def dataset_fingerprint(rows) -> str:
    h = hashlib.sha256()
    for key in ("input_ids", "loss_mask", "attention_mask"):
        t = getattr(rows, key).contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy())
    return h.hexdigest()[:16]


def _refuse_different(where, have: dict, want: dict, fix: str) -> None:
    """One error naming every key of `want` whose value differs in `have` (the cache's)."""
    diff = [k for k in want if have.get(k) != want[k]]
    if diff:
        parts = ", ".join(f"{k} {json.dumps(have.get(k))} (this run: {json.dumps(want[k])})" for k in diff)
        raise DraftsmithError(f"feature cache {where} was written for {parts}: {fix}")


# --- offline extraction --------------------------------------------------------------------------


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
            hidden = target_hidden_states(target.model, ids, mask, layers, name=target.name).hidden
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


def _shard_name(i: int) -> str:
    return f"shard-{i:05d}.safetensors"


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


def _write_atomic(path: pathlib.Path, write) -> None:
    """`write(tmp)` beside `path`, fsync, rename: a kill leaves no file or the whole file under its name."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except Exception as e:  # noqa: BLE001 -- safetensors reports a failed write as its own type
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # nothing half-written stays, under any name
        io_error = _io_error(e)
        if io_error is None:
            raise
        full = io_error.errno in (errno.ENOSPC, errno.EDQUOT)
        raise DraftsmithError(
            f"{'disk full' if full else 'cannot write'} ({io_error.strerror or io_error}) while writing {path}: "
            "free space, then rerun the same command (the finished shards are kept)"
        ) from None
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _barrier(accelerator) -> None:
    if accelerator is not None:
        accelerator.wait_for_everyone()


def _read_json(path: pathlib.Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DraftsmithError(
            f"{path}: unreadable ({type(e).__name__}: {e}); delete {path.parent} and re-extract"
        ) from None
    if not isinstance(data, dict):
        raise DraftsmithError(f"{path}: corrupt (not a JSON object); delete {path.parent} and re-extract")
    return data


def _opened(path: pathlib.Path):
    from safetensors import safe_open

    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as e:  # noqa: BLE001 -- safetensors raises its own error type, or OSError
        raise DraftsmithError(
            f"{path}: unreadable feature shard ({type(e).__name__}: {str(e)[:200]}); delete it "
            f"and rerun the extraction to rewrite it"
        ) from None


# --- reading the cache ---------------------------------------------------------------------------


class OfflineFeatures:
    """Features read back from an `extract`ed cache, by training row (batch["row"], indices into
    the TRAIN split: held-out batches have no cached features and go through OnlineFeatures)."""

    def __init__(self, cache_dir, target, layers, max_length: int, train_rows):
        self.dir, self.target, self.layers = pathlib.Path(cache_dir), target, tuple(layers)
        n_states = num_hidden_states(target.config)
        check_layers(self.layers, n_states, target.name)
        if not (self.dir / MANIFEST).is_file():
            raise DraftsmithError(
                f"feature cache {self.dir} has no {MANIFEST} (not extracted, or the extraction did "
                f"not finish): run python -m draftsmith.train.features RECIPE --output {self.dir}"
            )
        manifest = _read_json(self.dir / MANIFEST)
        want = settings(target, self.layers, max_length, train_rows, manifest.get("dtype", "bfloat16"))
        _refuse_different(
            self.dir,
            manifest,
            comparable(manifest, want),
            "re-extract it for this run with python -m draftsmith.train.features RECIPE --output DIR (a new folder)",
        )
        try:
            self.shards = [(s["rows"][0], s["rows"][1], self.dir / s["file"]) for s in manifest["shards"]]
            self.dtype = CACHE_DTYPES[manifest["dtype"]]
        except (KeyError, TypeError, IndexError):
            raise DraftsmithError(
                f"{self.dir / MANIFEST}: corrupt (no valid shards/dtype); delete {self.dir} and re-extract"
            ) from None
        self.shards.sort()
        self.starts = [lo for lo, _, _ in self.shards]
        for _, _, path in self.shards:
            if not path.is_file():
                raise DraftsmithError(
                    f"feature cache {self.dir}: {path.name} is missing; rerun the extraction to rewrite it"
                )
        self.width = len(self.layers) * want["hidden_size"]
        # Logits need the LM head's input, the last layer after the final norm: index n_states - 1.
        self.last = next((j for j, layer in enumerate(self.layers) if layer % n_states == n_states - 1), None)
        self.open: collections.OrderedDict = collections.OrderedDict()

    def __call__(self, batch: dict, want_logits: bool = False, logit_rows=None) -> Features:
        if want_logits and self.last is None:
            raise DraftsmithError(
                f"feature cache {self.dir} holds layers {list(self.layers)}, not the last layer (-1) "
                f"the logits are computed from: extract with -1 among the layers, or use online features"
            )
        rows, lengths = batch["row"].tolist(), batch["attention_mask"].sum(dim=1).tolist()
        hidden = torch.zeros(len(rows), batch["input_ids"].shape[1], self.width, dtype=self.dtype)
        for b, (row, length) in enumerate(zip(rows, lengths)):
            stored = self._row(row)
            if tuple(stored.shape) != (length, self.width):
                raise DraftsmithError(
                    f"feature cache {self.dir}: row {row} holds {tuple(stored.shape)}, the batch needs "
                    f"({length}, {self.width}): is batch['row'] an index into the training split?"
                )
            hidden[b, :length] = stored
        hidden = hidden.to(device=self.target.device, dtype=self.target.dtype)
        logits = None
        if want_logits:
            d = self.width // len(self.layers)
            with torch.no_grad():
                head = self.target.model.get_output_embeddings()
                last = hidden[..., self.last * d : (self.last + 1) * d]
                logits = head(last if logit_rows is None else last[logit_rows])
                cap = getattr(self.target.config.get_text_config(), "final_logit_softcapping", None)
                if cap:  # Gemma-2/3 squash logits after the head; the model's forward would too
                    logits = torch.tanh(logits / cap) * cap
        return Features(hidden, logits, None if logit_rows is None else row_index(logit_rows))

    def _row(self, row: int) -> torch.Tensor:
        k = bisect.bisect_right(self.starts, row) - 1
        if k < 0 or row >= self.shards[k][1]:
            raise DraftsmithError(
                f"feature cache {self.dir} has no row {row} (it holds {self.shards[-1][1]} training rows)"
            )
        f = self.open.pop(k, None)
        f = _opened(self.shards[k][2]) if f is None else f
        self.open[k] = f  # most recently used last
        if len(self.open) > OPEN_SHARDS:
            self.open.popitem(last=False)
        try:
            return f.get_tensor(f"row.{row}")
        except Exception as e:  # noqa: BLE001 -- a missing key or a truncated file
            raise DraftsmithError(
                f"{self.shards[k][2]}: cannot read row {row} ({type(e).__name__}: {str(e)[:200]}); "
                f"delete the shard and rerun the extraction to rewrite it"
            ) from None
