"""`draftsmith export CKPT --format hf|vllm|sglang|gguf --output-dir DIR`: a trained checkpoint in
the layout a serving engine loads (DIR/config.json is that engine's config).

Each format is a contract module (hf.py, vllm.py, sglang.py, gguf.py) ending in one `Format`
(format.py): the engine it serves and the engine version and source files it was checked
against, the config keys and weight names that engine reads, and a `check(folder, kind)` that
lists what an exported folder gets wrong. The formats, their help and their options are read from
those declarations. An export is written into a temporary folder beside DIR and renamed into
place, so a failure (a full disk included) never leaves half a folder that looks complete.

Beside the engine's files every export writes `draftsmith_export.json`: the format, the source
checkpoint, the verifier (the target, as a Hub id where there is one), the number of speculative
tokens and the command that serves it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import numbers
import os
import pathlib
import shutil
import signal
import tempfile
import threading

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import write_json
from draftsmith.kinds import KINDS
from draftsmith.shipping.export.common import article, hub_id
from draftsmith.shipping.export.format import Format, formats_of, get_format, kinds_of, names
from draftsmith.shipping.export.hf import check_complete

FORMATS = names()  # format.py's registry of the export formats
# Which formats a kind has, its repo-name suffix and what caps its k: draftsmith/kinds.py (KINDS).
EXPORT_META = "draftsmith_export.json"
log = logging.getLogger("draftsmith")

__all__ = [
    "EXPORT_META",
    "FORMATS",
    "add_arguments",
    "check",
    "default_repo_name",
    "export",
    "formats_for",
    "hub_id",
    "main",
    "run",
]


def open_checkpoint(checkpoint):
    """The checkpoint `checkpoint` names (a path, or a `draftsmith.models.Checkpoint` already
    opened, handed on as it is), its config.json read: one clear error if it is not one."""
    from draftsmith.models.checkpoint import Checkpoint

    ckpt = Checkpoint.of(checkpoint)  # a run folder: its best/ or final/ (said in one line)
    ckpt.config  # noqa: B018 -- read now: a corrupt config.json is named before anything else
    return ckpt


def formats_for(kind: str) -> list[str]:
    """The export formats that apply to a drafter kind (its entry's `Kind.exports` in
    draftsmith/kinds.py)."""
    if kind not in KINDS or not formats_of(kind):
        exportable = [k for k in KINDS if formats_of(k)]
        raise DraftsmithError(f"no export for {kind!r} drafters; exportable kinds: {', '.join(exportable)}")
    return formats_of(kind)


def _module(fmt: str) -> Format:
    return get_format(fmt)


def default_repo_name(checkpoint) -> str:
    """A Hub repo name carrying the method, e.g. "SmolLM2-135M-Instruct-eagle3": the target's Hub
    name (or its own name) + the method, since vLLM infers the method from the name.
    `checkpoint`: a folder or an opened `draftsmith.models.Checkpoint`."""
    ckpt = open_checkpoint(checkpoint)
    formats_for(ckpt.kind)
    target = ckpt.target_name
    repo = hub_id(target)
    base = repo.split("/")[-1] if repo else pathlib.Path(target.rstrip("/")).name or "draft"
    if base.lower().endswith(".gguf"):
        base = base[: -len(".gguf")]
    return f"{base}-{KINDS[ckpt.kind].repo_suffix}"


def export(
    checkpoint,
    fmt: str,
    output_dir,
    *,
    num_speculative_tokens: int | None = None,
    verifier: str | None = None,
    **options,
) -> pathlib.Path:
    """Write the checkpoint as format `fmt` into `output_dir` (absent or empty). -> output_dir.

    checkpoint: a checkpoint folder (a run folder: its best/ or final/), or a
    `draftsmith.models.Checkpoint` already opened (read again from nothing).

    num_speculative_tokens: tokens drafted per step recorded for the engine (vLLM's
    speculative_tokens, SGLang's num-steps); default the kind's `default_k` (draftsmith/kinds.py, as generate and
    eval draft), at most a capped kind's k_limit (Medusa: its heads)
    (vllm: only    the first k heads are exported). verifier: the target the engine pairs the draft with;
    default the target's Hub id, else the target as the checkpoint names it. options: the
    format's own (gguf: gguf_type, default f16); another format's option is ignored.
    """
    if fmt not in names():
        raise DraftsmithError(f"unknown export format {fmt!r}; formats: {', '.join(names())}")
    k = num_speculative_tokens
    if k is not None and (isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1):
        raise DraftsmithError(f"num_speculative_tokens: a whole number >= 1 (or None: the kind's default), not {k!r}")
    module = get_format(fmt)
    options = _options(module, options)
    ckpt = open_checkpoint(checkpoint)
    kind = ckpt.kind
    applies = formats_for(kind)
    if fmt not in applies:
        raise DraftsmithError(
            f"format {fmt!r} does not apply to {article(kind)} checkpoint; formats for {kind}: {', '.join(applies)}"
        )
    out = pathlib.Path(output_dir).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DraftsmithError(
            f"{out} exists and is not an empty folder; choose a new --output-dir (export never overwrites)"
        )
    check_complete(ckpt)
    k = _num_tokens(ckpt, num_speculative_tokens)
    if not ckpt.meta.get("target"):
        taken = ckpt.target_name
        log.warning(
            "warning: %s: its drafter.json names no target (the model it was trained against); %s",
            ckpt.path,
            f"the export takes config.json's {taken!r}" if taken else "the export records none",
        )
    if not verifier and not ckpt.target_name:
        log.warning("warning: no verifier for the engine: pass --verifier with the target to serve the draft with")
    verifier, verifier_note = (verifier, None) if verifier else _verifier(ckpt.target_name)

    with _terminate_cleans_up():  # a kill by SIGTERM removes the temporary folder, as Ctrl-C does
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.export-"))
        except OSError as e:
            raise DraftsmithError(
                f"--output-dir {out}: cannot write in {out.parent} ({e.strerror or e}); pick a writable folder"
            ) from None
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the export is an ordinary folder
            try:
                notes = module.write(ckpt, tmp, num_speculative_tokens=k, verifier=verifier, **options)
            except OSError as e:
                _write_failed(e, out, tmp)
            except KeyError as e:  # a weight config.json calls for is not in the weights (check_intact's net missed it)
                raise DraftsmithError(
                    f"checkpoint {ckpt.path} is damaged: config.json calls for {e.args[0]!r}, which its weights lack; "
                    "copy the whole folder again or retrain it"
                ) from None
            if verifier_note and module.serve_names_target:
                notes["note"] = "; ".join(n for n in (notes.get("note"), verifier_note) if n)
            problems = module.check(tmp, kind)
            if problems:  # a contract violation is our bug, not the user's: say so plainly
                raise DraftsmithError(
                    f"internal error: the {fmt} export of {ckpt.path} breaks its contract: {'; '.join(problems)}"
                )
            meta = {
                "format": fmt,
                "engine": module.engine,
                "checked_against": module.checked_against,
                "kind": kind,
                "source_checkpoint": str(ckpt.path.resolve()),
                "target": ckpt.target_name,
                "verifier": verifier,
                "num_speculative_tokens": notes.pop("num_speculative_tokens", k),
                "repo_name": default_repo_name(ckpt),
                **{key: _fill(v, out) for key, v in notes.items()},
            }
            try:
                write_json(tmp / EXPORT_META, meta)
            except OSError as e:
                _write_failed(e, out, tmp)
            try:
                os.replace(tmp, out)  # a folder's rename: an empty folder at `out` is replaced atomically
            except OSError as e:  # ENOTEMPTY/EEXIST: another export (or anything) filled `out` meanwhile
                if out.is_dir() and any(out.iterdir()):
                    raise DraftsmithError(
                        f"--output-dir {out} was filled by another export while this one ran; that one is kept and "
                        "nothing of this one was written: choose a new --output-dir"
                    ) from None
                raise DraftsmithError(
                    f"--output-dir {out}: could not move the export into place ({e.strerror or e})"
                ) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return out


class _Terminated(BaseException):
    """SIGTERM arrived while an export was being written (raised by the handler below)."""


@contextlib.contextmanager
def _terminate_cleans_up():
    """While an export is written, SIGTERM raises (as SIGINT raises KeyboardInterrupt), so the
    export's cleanup removes its temporary folder; the process then dies of SIGTERM as it would
    have. Only where SIGTERM has its default action and in the main thread (a program that
    handles SIGTERM itself keeps its handler)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminated(signum, frame):
        raise _Terminated

    signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # the temporary folder is gone: die as SIGTERM kills
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# Errors that mean "this folder cannot take the export" wherever they come from; EACCES/EPERM only
# when the file being written is the export's own (a checkpoint file we cannot read is another matter).
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def _write_failed(e: OSError, out: pathlib.Path, tmp: pathlib.Path):
    """Writing into the temporary folder failed: one line naming `out`; the caller's cleanup
    removes the temporary folder, so nothing at or beside `out` looks like a finished export."""
    ours = e.filename is not None and str(e.filename).startswith(str(tmp))
    if e.errno not in _NO_ROOM and not (ours and e.errno in (errno.EACCES, errno.EPERM)):
        raise e
    why = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e))
    raise DraftsmithError(
        f"--output-dir {out}: writing the export failed ({why}); its half-written copy was removed, so "
        f"nothing at {out} looks like a finished export: free space or pick another folder and run it again"
    ) from None


def _options(fmt: Format, given: dict) -> dict:
    """The format's own options, with their defaults; another format's option is dropped (callers
    pass one set of options for every format); a name no format declares is an error."""
    own = {o.dest: o for o in fmt.options}
    for name, value in given.items():
        if name in own and value is not None and value not in own[name].choices:
            raise DraftsmithError(f"{own[name].flag} {value!r}: choose one of {', '.join(own[name].choices)}")
        if name not in own and not any(name == o.dest for f in names() for o in get_format(f).options):
            raise TypeError(f"export() got an unexpected option {name!r}")
    return {dest: given[dest] if given.get(dest) is not None else o.default for dest, o in own.items()}


def check(folder, fmt: str, kind: str) -> list[str]:
    """What an exported folder gets wrong against format `fmt`'s contract ([] = nothing)."""
    return _module(fmt).check(folder, kind)


def _verifier(target: str) -> tuple[str, str | None]:
    """(what the engine should load as the target, a note): the Hub id where there is one; a
    built-in with none (tiny-random) is not a name an engine can resolve, so its local folder
    (built as training built it) and a note saying so; else the target as the checkpoint names it."""
    repo = hub_id(target)
    if repo:
        return repo, None
    from draftsmith.models.sources import BUILTINS, resolve_model

    if target in BUILTINS:
        folder = resolve_model(target).path
        return folder, f"the target {target} is not on the Hub: the engine loads draftsmith's local copy {folder}"
    path = pathlib.Path(target).expanduser()
    return (str(path.resolve()) if path.exists() else target), None


def _num_tokens(ckpt, k: int | None) -> int:
    from draftsmith.infer.proposal import check_num_speculative_tokens  # the one check generate/eval/bench use

    key = KINDS[ckpt.kind].k_limit  # Medusa: its heads, a block drafter: its block
    limit = int(ckpt.config.get(key) or ckpt.meta.get(key) or 0) if key else None
    if k is None:  # the kind's default K (draftsmith/kinds.py), within its cap: what generate/eval draft
        from draftsmith.models.base import default_num_speculative_tokens

        return default_num_speculative_tokens(ckpt.kind, limit)
    return check_num_speculative_tokens(k, limit, f"this {ckpt.kind} checkpoint ({key}={limit})")


def _fill(value, out: pathlib.Path):
    return value.replace("DIR", str(out)) if isinstance(value, str) else value


# --- command line -------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    """The arguments of `draftsmith export` (the lead wires the subcommand)."""
    parser.add_argument(
        "checkpoint",
        help="a checkpoint folder written by `draftsmith train` (runs/NAME/final), or the run folder runs/NAME "
        "(its best/ checkpoint when it has one, else final/)",
    )
    parser.add_argument(
        "--format",
        dest="format",
        required=True,
        choices=FORMATS,
        help=_format_help(),
    )
    parser.add_argument("--output-dir", required=True, help="where to write (must not exist, or be empty)")
    parser.add_argument(
        "--num-speculative-tokens",
        "-k",
        type=int,
        default=None,
        help="tokens drafted per step recorded for the engine (default: the kind's default K, "
        f"{'/'.join(sorted({str(k.default_k) for k in KINDS.values()}))}, the generate/eval default; a kind with a cap "
        f"({', '.join(k.name for k in KINDS.values() if k.k_limit)}): at most its cap, more is refused)",
    )
    for fmt in names():  # each format's own options (gguf: --gguf-type), declared in its module
        for o in get_format(fmt).options:
            parser.add_argument(o.flag, dest=o.dest, choices=o.choices, default=None, help=o.help)
    parser.add_argument(
        "--verifier", default=None, help="the target the engine serves the draft with (default: the target's Hub id)"
    )


def _format_help() -> str:
    """--format's help: each format's own, with the kinds it applies to read from KINDS (never a hand list)."""
    return "; ".join(f"{f}: {get_format(f).help} ({', '.join(kinds_of(f))})" for f in names())


def run(args) -> int:
    """Run `draftsmith export` for parsed `args`; DraftsmithError propagates (the CLI prints it)."""
    if not args.output_dir.strip():
        raise DraftsmithError('--output-dir "": name the folder to write the export into')
    options = {}
    for fmt in names():
        for o in get_format(fmt).options:
            value = getattr(args, o.dest, None)
            if value is not None and fmt != args.format:
                raise DraftsmithError(
                    f"{o.flag} applies to --format {fmt} only; leave it out for --format {args.format}"
                )
            options[o.dest] = value
    out = export(
        args.checkpoint,
        args.format,
        args.output_dir,
        num_speculative_tokens=args.num_speculative_tokens,
        verifier=args.verifier,
        **options,
    )
    meta = json.loads((out / EXPORT_META).read_text())
    print(f"wrote {meta['engine']} {meta['kind']} export to {out}")
    print(f"serve: {meta['serve']}")
    if meta.get("note"):
        print(f"note: {meta['note']}")
    return 0


def main(argv=None) -> int:
    import argparse

    from draftsmith.errors import run_command

    parser = argparse.ArgumentParser(prog="draftsmith export", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_command(run, parser.parse_args(argv))
