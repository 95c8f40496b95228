"""`gguf`: what llama.cpp loads, for the kinds its speculative decoding takes.

- draft_lm: a plain causal LM (our `hf` export) -> GGUF with llama.cpp's own converter; served with
  `--spec-type draft-simple -md FILE`.
- eagle3: our `vllm` export (speculators layout: `layers.0.*`, `d2t` as offsets, the aux layer ids,
  norm_before_residual false) -> GGUF architecture `eagle3` with `--target-model-dir` (the
  converter takes the tokenizer and the target's layer count from there, and writes d2t as
  absolute target ids); served with `--spec-type draft-eagle3 -md FILE`.

The conversion is llama.cpp's `convert_hf_to_gguf.py` from the pinned source (the one the engine
itself is built from: scripts/install_engines.sh), run in that install's own Python: the format
then is exactly what that llama.cpp reads, and `draftsmith crosscheck --engines llamacpp` proves
it by decoding with it. Checked against llama.cpp at the commit vendored by llama-cpp-python
0.3.36 (0c1e570): conversion/llama.py (EAGLE-3 detection by `draft_vocab_size` and one layer,
midlayer./layers.0. renaming, d2t), common/speculative.cpp (draft-simple, draft-eagle3).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_atomic
from draftsmith.shipping.export.common import Layout, layout
from draftsmith.shipping.export.format import Format, Option, get_format, late

if TYPE_CHECKING:
    from draftsmith.models.checkpoint import Checkpoint

ENGINE = "llama.cpp"
CHECKED_AGAINST = (
    "llama.cpp 0c1e570 (vendored by llama-cpp-python 0.3.36): convert_hf_to_gguf.py, conversion/llama.py, "
    "common/speculative.cpp, examples/speculative-simple"
)
GGUF_TYPES = ("f32", "f16", "bf16")
REQUIRES = "llamacpp"  # the engine install whose converter writes the file (draftsmith/shipping/installs.py)
CONVERT_TIMEOUT_S = 1800


@dataclass(frozen=True)
class GgufLayout(Layout):
    """A kind's GGUF layout: which of our exports llama.cpp's converter reads ("hf" or "vllm"),
    the GGUF architecture it writes (None: whatever the LM is) and llama.cpp's --spec-type."""

    converter_reads: str | None = None
    architecture: str | None = None
    spec_type: str | None = None


def file_name(kind: str, gguf_type: str) -> str:
    return f"draft-{kind}-{gguf_type}.gguf"


def write(
    ckpt: Checkpoint, out: pathlib.Path, *, num_speculative_tokens: int, verifier: str, gguf_type: str = "f16"
) -> dict:
    from draftsmith.models.sources import resolve_model
    from draftsmith.shipping.installs import require

    require(REQUIRES)  # its converter writes the file: say how to install it before any work
    if gguf_type not in GGUF_TYPES:
        raise DraftsmithError(f"--gguf-type {gguf_type!r}: choose one of {', '.join(GGUF_TYPES)}")
    kind, lay = ckpt.kind, layout(ckpt.kind, "gguf")
    dtype = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[gguf_type]
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".gguf-src-") as src:
        src = pathlib.Path(src)
        target_dir = None
        get_format(lay.converter_reads).write(
            ckpt, src, num_speculative_tokens=num_speculative_tokens, verifier=verifier
        )
        if lay.converter_reads == "vllm":  # an EAGLE-3 GGUF carries the target's embedding: the converter reads it
            target_dir = resolve_model(ckpt.target_name).path
        convert_to_gguf(
            src, out / file_name(kind, gguf_type), dtype, target_dir=target_dir, log_path=out / "convert.log"
        )
    target_file = f"TARGET.gguf (the target {verifier} as GGUF, e.g. convert_hf_to_gguf.py --outtype {gguf_type})"
    serve = (
        f"llama-speculative-simple -m {target_file} -md DIR/{file_name(kind, gguf_type)} --spec-type "
        f"{lay.spec_type} "
        f"--spec-draft-n-max {num_speculative_tokens} -p PROMPT"
    )
    return {"serve": serve, "gguf_type": gguf_type, "file": file_name(kind, gguf_type)}


def outtype(dtype: str) -> str:
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(dtype, "f32")


def _readable_by_converter(model_dir: pathlib.Path, stage: pathlib.Path) -> pathlib.Path:
    """The folder as the converter's transformers 4.x reads it. transformers 5 saves fast
    tokenizers as `"tokenizer_class": "TokenizersBackend"`, a class 4.x does not have: stage a
    copy (links to the files) whose tokenizer_config names PreTrainedTokenizerFast, the same
    tokenizer.json-backed tokenizer under its 4.x name."""
    cfg = model_dir / "tokenizer_config.json"
    if not cfg.is_file() or json.loads(cfg.read_text()).get("tokenizer_class") != "TokenizersBackend":
        return model_dir
    stage.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        if f.name != cfg.name:
            (stage / f.name).symlink_to(f.resolve())
    (stage / cfg.name).write_text(
        json.dumps({**json.loads(cfg.read_text()), "tokenizer_class": "PreTrainedTokenizerFast"})
    )
    return stage


def convert_to_gguf(model_dir, out_file, dtype: str = "float32", target_dir=None, log_path=None) -> pathlib.Path:
    """HF folder -> one GGUF file, with llama.cpp's own converter in its own venv (the install
    this format `requires`). EAGLE-3 drafts take the target's folder (`--target-model-dir`): the
    converter reads its tokenizer and layers. The file appears whole or not at all
    (draftsmith/fileio.py's write_atomic); the llama.cpp driver converts the target with it too."""
    from draftsmith.shipping.installs import require

    folder = require(REQUIRES)
    out_file = pathlib.Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)

    def convert(tmp: pathlib.Path) -> None:
        with tempfile.TemporaryDirectory(prefix="draftsmith-gguf-") as stage:
            stage = pathlib.Path(stage)
            # -E -s, not -I: the converter imports its own `conversion` package from beside the script
            argv = [
                str(folder / "venv" / "bin" / "python"),
                "-E",
                "-s",
                str(folder / "convert_hf_to_gguf.py"),
                str(_readable_by_converter(pathlib.Path(model_dir), stage / "model")),
                "--outfile",
                str(tmp),
                "--outtype",
                outtype(dtype),
            ]
            if target_dir is not None:
                argv += ["--target-model-dir", str(_readable_by_converter(pathlib.Path(target_dir), stage / "target"))]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S)
        if log_path is not None:
            pathlib.Path(log_path).write_text(r.stdout + r.stderr)
        if r.returncode != 0 or not tmp.is_file():
            last = [line for line in (r.stderr or r.stdout).strip().splitlines() if line.strip()][-1:] or ["no output"]
            raise DraftsmithError(f"llama.cpp's convert_hf_to_gguf.py could not convert {model_dir}: {last[0][:300]}")

    write_atomic(out_file, convert)
    return out_file


def check(folder, kind: str) -> list[str]:
    """What a GGUF export gets wrong: one readable .gguf file whose architecture llama.cpp's
    speculative type for `kind` expects, with tensors in it."""
    folder = pathlib.Path(folder)
    files = sorted(folder.glob("*.gguf"))
    if len(files) != 1:
        return [f"expected one .gguf file in {folder}, found {len(files)}"]
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(files[0]))
        field = reader.fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode()
    except Exception as e:  # noqa: BLE001 -- gguf raises a variety of errors on a bad file
        return [f"{files[0].name}: not a readable GGUF file ({type(e).__name__}: {e})"]
    problems = []
    lay = layout(kind, "gguf")
    if lay.architecture is not None and arch != lay.architecture:
        problems.append(
            f"{files[0].name}: architecture {arch!r}, llama.cpp's {lay.spec_type} needs {lay.architecture!r}"
        )
    if not reader.tensors:
        problems.append(f"{files[0].name}: no tensors")
    return problems


# What llama.cpp's convert_hf_to_gguf.py reads for a kind and how llama.cpp serves it: a causal LM
# as is (architecture: whatever the LM is); an EAGLE-3 draft in the speculators layout (layers.0.*,
# d2t offsets) with the target beside it.
DRAFT_LM = GgufLayout(converter_reads="hf", spec_type="draft-simple")
EAGLE3 = GgufLayout(converter_reads="vllm", architecture="eagle3", spec_type="draft-eagle3")

FORMAT = Format(
    name="gguf",
    engine=ENGINE,
    help="llama.cpp (needs `bash scripts/install_engines.sh llamacpp` for its converter)",
    layout_type=GgufLayout,
    write=late(write),
    check=late(check),
    checked_against=CHECKED_AGAINST,
    crosscheck="llamacpp",
    draft_first=True,
    proven="llama.cpp drafts the first token too (crosscheck compares it with draftsmith's runtime on that "
    "schedule). The target must be a GGUF of the same model (f16/f32; Q4_1 crashes in llama.cpp's AMX path on "
    "some CPUs: add --no-repack).",
    options=(
        Option(
            "--gguf-type",
            "gguf_type",
            ("f16", "bf16", "f32"),
            "f16",
            "--format gguf only: the weights' type (default f16; f32 for exact cross-checks against float32 runs)",
        ),
    ),
    requires=REQUIRES,
    requires_note="llama.cpp's converter is not installed here (bash scripts/install_engines.sh llamacpp)",
    label="GGUF",
)
