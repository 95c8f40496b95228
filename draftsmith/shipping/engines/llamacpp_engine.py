"""llama.cpp as a cross-check engine: its own programs, built by scripts/install_engines.sh.

- plain decoding: `llama-completion` (greedy, no chat wrapping, the prompt text as given);
- speculative decoding: `llama-speculative-simple` with `--spec-type draft-simple` (an
  independent draft LM) or `draft-eagle3`, a chain of K (`--spec-draft-n-max/-n-min K`,
  `--spec-draft-p-min 0`: always K tokens, as vLLM and our engine draft).

These programs take text, not token ids: the prompt is our token ids decoded with the special
tokens kept, and `llama-tokenize` checks once per prompt that llama.cpp reads back exactly our
ids (a difference is an error: the two runtimes would decode different inputs). They print text,
so outputs are compared as text. The speculative example prints each verification step at debug
verbosity ("accepted A/D draft tokens"): acceptance is counted from those lines, over the steps
our engine would run for the same budget. llama.cpp drafts the first token too (its first batch
is [last prompt token, drafts]): compare it with Engine(draft_first=True).

Models are GGUF: the target is converted once (convert_hf_to_gguf.py from the same llama.cpp
source, f32 for the float32 contract, else f16) into draftsmith's cache; drafts come from
`draftsmith export --format gguf`.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import subprocess
import time

from draftsmith.errors import DraftsmithError
from draftsmith.kinds import get_kind
from draftsmith.shipping.engines import EngineOutput, require
from draftsmith.shipping.export.gguf import convert_to_gguf, outtype  # the format's converter, also the target's

STEP_LINE = re.compile(r"accepted (\d+)/(\d+) draft tokens, the last target token is: \((-?\d+)\)")
TIMEOUT_S = 1800


def target_gguf(target_dir, dtype: str) -> pathlib.Path:
    """The target converted once and cached, keyed by its config, weights' size and mtime, and dtype."""
    from draftsmith.models.cache_folder import cache_dir

    target_dir = pathlib.Path(target_dir)
    stamp = [str(target_dir.resolve()), outtype(dtype), (target_dir / "config.json").read_text()]
    for f in sorted(target_dir.glob("*.safetensors")):
        st = f.stat()
        stamp += [f.name, st.st_size, st.st_mtime_ns]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:16]
    out = cache_dir() / "gguf" / f"{target_dir.name}-{outtype(dtype)}-{key}.gguf"
    if not out.is_file():
        convert_to_gguf(target_dir, out, dtype, log_path=out.with_suffix(".log"))
    return out


def _draft_file(draft) -> pathlib.Path:
    draft = pathlib.Path(draft)
    if draft.is_file():
        return draft
    files = sorted(draft.glob("*.gguf"))
    if len(files) != 1:
        raise DraftsmithError(
            f"{draft}: expected one .gguf file (a `draftsmith export --format gguf` folder), found {len(files)}"
        )
    return files[0]


def steps_from_log(text: str) -> list[tuple[int, int, int]]:
    """(accepted, drafted, last target token) for each verification step the example logged."""
    return [(int(a), int(d), int(t)) for a, d, t in STEP_LINE.findall(text)]


def count_steps(steps, max_new_tokens: int, eos: set[int]) -> tuple[list[tuple[int, int]], int]:
    """The steps our engine would have run for `max_new_tokens` (it stops once that many tokens
    are out, or at EOS), as (accepted, drafted), and the tokens they emitted."""
    kept, emitted = [], 0
    for accepted, drafted, last in steps:
        if emitted >= max_new_tokens:
            break
        kept.append((accepted, drafted))
        emitted += accepted + 1
        if last in eos:
            break
    return kept, emitted


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(
        self,
        target_dir,
        *,
        tokenizer,
        draft_gguf=None,
        kind: str | None = None,
        num_speculative_tokens: int | None = None,
        workdir=".",
        dtype: str = "float32",
        max_model_len: int = 2048,
        threads: int | None = None,
    ):
        folder = require("llamacpp")
        self.bin = folder / "build" / "bin"
        self.tokenizer = tokenizer
        self.workdir = pathlib.Path(workdir)
        self.model = target_gguf(target_dir, dtype)
        self.threads = threads or len(os.sched_getaffinity(0))
        self.ctx = int(max_model_len)
        self.k = num_speculative_tokens
        self.draft = None if draft_gguf is None else _draft_file(draft_gguf)
        # the --spec-type our gguf export declares for this kind (draftsmith/kinds.py -> export/gguf.py)
        self.spec_type = None if self.draft is None else get_kind(kind).layout("gguf").spec_type
        self.versions = {"llama.cpp": (folder / "INSTALLED").read_text().strip()}
        self._checked: dict[tuple, str] = {}

    def _prompt_text(self, prompt_ids) -> str:
        """Our ids as text llama.cpp tokenises back to the same ids (checked with llama-tokenize)."""
        key = tuple(prompt_ids)
        if key not in self._checked:
            text = self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
            r = self._run(
                [str(self.bin / "llama-tokenize"), "-m", str(self.model), "-p", text, "--ids", "--log-disable"], 300
            )
            ids = json.loads(r.stdout.strip().splitlines()[-1])
            if ids != list(prompt_ids):
                raise DraftsmithError(
                    f"llama.cpp tokenises the prompt {text[:40]!r}... differently from the target's tokenizer "
                    f"({len(ids)} vs {len(prompt_ids)} tokens): the runtimes would not decode the same input"
                )
            self._checked[key] = text
        return self._checked[key]

    def _run(self, argv, timeout) -> subprocess.CompletedProcess:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
        if r.returncode != 0:
            log = self.workdir / "llamacpp-error.log"
            log.write_text(" ".join(argv) + "\n\n" + r.stdout + "\n" + r.stderr)
            last = [line for line in r.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
            raise DraftsmithError(
                f"llama.cpp {pathlib.Path(argv[0]).name} failed (exit {r.returncode}): {last[0][:300]}; log: {log}"
            )
        return r

    def generate(self, prompt_ids, max_tokens: int, stop_token_ids=()) -> EngineOutput:
        text = self._prompt_text(prompt_ids)
        common = [
            "-m",
            str(self.model),
            "-p",
            text,
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "-c",
            str(self.ctx),
            "--temp",
            "0",
            "--seed",
            "0",
        ]
        if self.draft is None:
            argv = [
                str(self.bin / "llama-completion"),
                *common,
                "-n",
                str(max_tokens),
                "-no-cnv",
                "--no-display-prompt",
                "--no-warmup",
            ]
        else:  # -n past our budget so the example's own cap (n_predict - emitted - 1) never shortens a counted draft
            argv = [
                str(self.bin / "llama-speculative-simple"),
                *common,
                "-n",
                str(max_tokens + self.k + 1),
                "-md",
                str(self.draft),
                "--spec-type",
                self.spec_type,
                "--spec-draft-n-max",
                str(self.k),
                "--spec-draft-n-min",
                str(self.k),
                "--spec-draft-p-min",
                "0",
                "-td",
                str(self.threads),
                "-v",
            ]
        t = time.perf_counter()
        r = self._run(argv, TIMEOUT_S)
        wall = time.perf_counter() - t
        out = EngineOutput(
            [],
            _decode_seconds(r.stderr) or wall,
            text=_generated_text(r.stdout, text, self.draft is not None),
            num_tokens=_generated_tokens(r.stderr),
        )
        if self.draft is not None:
            kept, _ = count_steps(steps_from_log(r.stderr), max_tokens, set(stop_token_ids))
            drafted = [s for s in kept if s[1] > 0]
            out.drafts = len(drafted)
            out.draft_tokens = sum(d for _, d in drafted)
            out.accepted_tokens = sum(a for a, _ in drafted)
            width = max((d for _, d in drafted), default=0)
            out.accepted_per_pos = [sum(1 for a, _ in drafted if a > j) for j in range(width)]
        return out

    def close(self) -> None:
        pass


def _generated_text(stdout: str, prompt_text: str, echoed: bool) -> str:
    """What the program printed after the prompt, its own framing cut exactly (the text itself
    may end in newlines): llama-completion prints only the new text (--no-display-prompt), then
    " [end of text]\n" at EOS, then "\n\n"; the speculative example prints "\n\n", the prompt,
    the new text, then "\n\n" twice."""
    if echoed:
        text = stdout.removeprefix("\n\n")
        text = text[len(prompt_text) :] if text.startswith(prompt_text) else text
        return text.removesuffix("\n\n\n\n")
    text = stdout.removesuffix("\n\n")
    return text.removesuffix(" [end of text]\n")


def _generated_tokens(stderr: str) -> int | None:
    """Tokens generated, as the programs count them: the example's "decoded N tokens", else the
    perf line's "eval time = ... / N runs" (one run per generated token)."""
    m = re.search(r"decoded\s+(\d+) tokens in", stderr) or re.search(
        r"\s eval time =\s+[\d.]+ ms /\s+(\d+) runs", stderr
    )
    return int(m.group(1)) if m else None


def _decode_seconds(stderr: str) -> float | None:
    """Prompt + generation seconds as the programs time them (model loading excluded): the
    speculative example's "encoded/decoded N tokens in S seconds", else llama's perf lines."""
    enc = re.search(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds", stderr)
    dec = re.search(r"decoded\s+\d+ tokens in\s+([\d.]+) seconds", stderr)
    if enc and dec:
        return float(enc.group(1)) + float(dec.group(1))
    prompt = re.search(r"prompt eval time =\s+([\d.]+) ms", stderr)
    evals = re.search(r"\s eval time =\s+([\d.]+) ms", stderr)
    if prompt and evals:
        return (float(prompt.group(1)) + float(evals.group(1))) / 1000
    return None


def crosscheck_engines(setup, export, max_model_len: int, tokenizer=None):
    """`draftsmith crosscheck`'s two llama.cpp runs for a checkpoint: the target alone, and the target
    with the `--format gguf` export drafting (weights typed as the target runs: f32 or bf16, else f16)."""
    gguf_dir = export(gguf_type={"float32": "f32", "bfloat16": "bf16"}.get(setup.dtype, "f16"))
    common = dict(tokenizer=tokenizer, workdir=setup.workdir, dtype=setup.dtype, max_model_len=max_model_len)
    plain = LlamaCppEngine(setup.target_dir, **common)
    spec = LlamaCppEngine(
        setup.target_dir, draft_gguf=gguf_dir, kind=setup.kind, num_speculative_tokens=setup.k, **common
    )
    return plain, spec, {"versions": spec.versions, "export": str(gguf_dir), "spec_type": spec.spec_type}
