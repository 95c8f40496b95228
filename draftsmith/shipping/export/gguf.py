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

import pathlib
import tempfile
from dataclasses import dataclass

from draftsmith.errors import DraftsmithError
from draftsmith.shipping.export.common import Checkpoint, Layout, layout
from draftsmith.shipping.export.format import Format, Option, get_format

ENGINE = "llama.cpp"
CHECKED_AGAINST = (
    "llama.cpp 0c1e570 (vendored by llama-cpp-python 0.3.36): convert_hf_to_gguf.py, conversion/llama.py, "
    "common/speculative.cpp, examples/speculative-simple"
)
GGUF_TYPES = ("f32", "f16", "bf16")


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
    from draftsmith.shipping.engines import require
    from draftsmith.shipping.engines.llamacpp_engine import convert_to_gguf

    require("llamacpp")  # its converter writes the file: say how to install it before any work
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
            target_dir = resolve_model(ckpt.target).path
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
    write_ref="draftsmith.shipping.export.gguf:write",
    check_ref="draftsmith.shipping.export.gguf:check",
    checked_against=CHECKED_AGAINST,
    crosscheck="llamacpp",
    crosscheck_ref="draftsmith.shipping.engines.llamacpp_engine:crosscheck_engines",
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
    requires="llamacpp",
    requires_note="llama.cpp's converter is not installed here (bash scripts/install_engines.sh llamacpp)",
    label="GGUF",
)
