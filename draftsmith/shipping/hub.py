"""`draftsmith publish`: a trained checkpoint, its engine exports and a model card, to the Hub.

The card is written by draftsmith/shipping/card.py (`build_card`, importable from here too); this
module stages the folder and uploads it. The checkpoint is opened once and handed on.

What is uploaded (``stage`` builds exactly this folder; ``--dry-run`` lists it and prints the card;
the layout's reasons: draftsmith/shipping/repo_meta.py):

    README.md            the model card: YAML metadata (eval results), measured table, how to serve, the recipe
    config.json, weights the vLLM export at the root: ``--speculative-config '{"model": "ORG/REPO"}'``
    draftsmith/          draftsmith's checkpoint: config, weights, tokenizer, drafter.json (Medusa-2: also
                         target/), crosscheck.json; at the root for a kind without a vLLM export
    sglang/ gguf/        ``draftsmith.shipping.export`` of each other engine format the method has
    recipe.yaml          the training recipe (from the run folder), and train_summary.json
    results/*.json       the bench/eval results the card's table is built from

Results: ``--results JSON`` (repeatable) names them; without it, every ``*.json`` directly in
the checkpoint folder or its run folder (the parent) that ``draftsmith bench/eval --json`` wrote
(keys ``mean_acceptance_length``, ``per_position_acceptance``, ``target``, ``draft``) and whose
``draft`` names this checkpoint (same resolved path, or the same ``run/checkpoint`` ending) is
used, oldest first (the newest is the last row). None: the card says nothing was measured.

The token comes from huggingface_hub (``HF_TOKEN``, or the file ``hf auth login`` writes); it is
only handed to ``HfApi``, never printed or written. The upload is one ``create_commit``, which
has the Hub validate the card's metadata before any weights are sent (``upload_folder`` with
hf_xet installed skips that check).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import re
import shutil
import tempfile

from draftsmith.errors import DraftsmithError, run_command
from draftsmith.fileio import write_json
from draftsmith.shipping.card import (  # noqa: F401 (the card's names, where the CLI, tests and users import them)
    LICENSES,
    NOT_DECODED,
    _proven_line,
    _staged_formats,
    build_card,
    opened,
    proofs,
    read_json_file,
    run_summary,
    target_facts,
)
from draftsmith.shipping.export.common import article
from draftsmith.shipping.repo_meta import CHECKPOINT_DIR, root_format

log = logging.getLogger(__name__)

NOT_PUBLISHED = {"training_state", "trainer_state.json", "__pycache__"}  # resume-only state
RESULT_KEYS = {"mean_acceptance_length", "per_position_acceptance", "target", "draft"}


def load_results(paths) -> list[dict]:
    """bench/eval `--json` files as dicts (each remembers its file name under "_source")."""
    out = []
    for p in map(pathlib.Path, paths):
        r = read_json_file(p)
        if not isinstance(r, dict) or not RESULT_KEYS <= set(r):
            raise DraftsmithError(
                f"{p}: not a `draftsmith bench/eval --json` result (needs {', '.join(sorted(RESULT_KEYS))})"
            )
        out.append({**r, "_source": p.name})
    return out


def foreign_result(r: dict, ckpt: pathlib.Path, meta: dict, identity) -> str | None:
    """Why result `r` was not measured with checkpoint `ckpt` (its drafter.json `meta`), or None
    when it was: the kind, the target and the checkpoint itself (the sha256 over drafter.json and
    the weights that `eval`/`bench --json` record; an older result without it must name this
    folder as its draft). `identity()` gives this checkpoint's (computed once, on demand)."""
    kind = r.get("drafter_kind")
    if kind and kind != meta["kind"]:
        return f"it measured {article(kind)} drafter ({r.get('draft')}), and {ckpt} is {article(meta['kind'])}"
    targets = {meta["target"], meta.get("base_target")}
    if meta.get("target_path"):
        targets.add(str((ckpt / meta["target_path"]).resolve()))
    measured = str(r.get("target"))
    if measured not in targets and str(pathlib.Path(measured).expanduser().resolve()) not in targets:
        return f"it was measured with the target {measured}, and {ckpt} drafts for {meta['target']}"
    recorded = r.get("draft_checkpoint")
    if isinstance(recorded, dict) and recorded.get("sha256"):
        mine = identity()
        if recorded["sha256"] != mine["sha256"]:
            return (
                f"it measured the checkpoint {recorded.get('path')} (sha256 {recorded['sha256'][:12]}), not this one "
                f"(sha256 {mine['sha256'][:12]})"
            )
        return None
    draft = pathlib.Path(str(r.get("draft")))
    if not (draft.exists() and draft.resolve() == ckpt):
        return f"it names the draft {r.get('draft')} and records no checkpoint hash to show it is {ckpt}"
    return None


def check_results(ckpt: pathlib.Path, meta: dict, results: list[dict], identity=None) -> None:
    """Refuse, in one line, results handed to `publish --results` that belong to another checkpoint.
    `identity()`: the checkpoint's (default: computed once, on demand)."""
    from draftsmith.models import checkpoint_identity

    cache: dict = {}

    def computed():
        if "id" not in cache:
            cache["id"] = checkpoint_identity(ckpt)
        return cache["id"]

    identity = identity or computed
    for r in results:
        why = foreign_result(r, ckpt, meta, identity)
        if why:
            raise DraftsmithError(
                f"--results {r.get('_source')} belongs to another checkpoint: {why}; measure this one "
                f"(draftsmith eval --draft {ckpt} --json FILE) and pass that file"
            )


def find_results(checkpoint) -> list[pathlib.Path]:
    """The rule in the module docstring: result JSONs beside the checkpoint that name it."""
    ckpt = pathlib.Path(checkpoint).resolve()
    found = []
    for folder in (ckpt, ckpt.parent):
        for p in sorted(folder.glob("*.json")):
            try:
                r = json.loads(p.read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            if not isinstance(r, dict) or not RESULT_KEYS <= set(r) or not isinstance(r["draft"], str):
                continue
            draft = pathlib.Path(r["draft"])
            if (draft.exists() and draft.resolve() == ckpt) or draft.parts[-2:] == ckpt.parts[-2:]:
                found.append(p)
            else:
                log.info("%s: results for draft %s, not this checkpoint; not used", p, r["draft"])
    return sorted(found, key=lambda p: p.stat().st_mtime)


def _place(src: pathlib.Path, dst: pathlib.Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)  # no copy of multi-GB weights when staging on the same filesystem
    except OSError:
        shutil.copy2(src, dst)


def _published(folder: pathlib.Path, fmt: str, repo_id: str | None, moved: bool) -> dict:
    """The export's draftsmith_export.json as the Hub holds it (no local paths): its folder is the
    repo id where it is the root (`repo_id`), else drafter/<format> as the card's `hf download ...
    --local-dir drafter` puts it; `moved`: the checkpoint is in draftsmith/, not the root."""
    from draftsmith.shipping.export import EXPORT_META

    info = read_json_file(folder / EXPORT_META)
    here = str(folder)

    def public(v):
        if not isinstance(v, str):
            return v
        if repo_id is None:
            return v.replace(here, f"drafter/{fmt}")
        return v.replace(here + "/", "drafter/").replace(here, repo_id)  # Medusa-2's target/: downloaded

    info = {key: public(v) for key, v in info.items()}
    info["source_checkpoint"] = CHECKPOINT_DIR if repo_id else f"../{CHECKPOINT_DIR}" if moved else ".."
    write_json(folder / EXPORT_META, info)
    if repo_id is not None:  # the card's metadata: which layout the root is
        config = read_json_file(folder / "config.json")
        info = {**info, "root": True, "speculators_model_type": config.get("speculators_model_type")}
    return info


def _lift(folder: pathlib.Path, out: pathlib.Path) -> None:
    """Move an export's files up to the repo root (the staging folder) and remove its folder."""
    for p in sorted(folder.iterdir()):
        if (out / p.name).exists():  # the checkpoint went to draftsmith/: nothing else is at the root yet
            raise DraftsmithError(f"internal error: {p.name} of the {folder.name} export is already at the repo root")
        os.replace(p, out / p.name)
    folder.rmdir()


def stage(
    checkpoint, repo_id: str, results: list[dict], staging_dir, *, license: str | None = None
) -> list[pathlib.Path]:
    """Write exactly what `publish` uploads into `staging_dir` (new or empty); its files, sorted.
    `checkpoint`: a folder, or a Checkpoint opened once and handed on to each export and the card."""
    from draftsmith.shipping.export import export, formats_for

    opened_ckpt = opened(checkpoint)
    ckpt, meta = opened_ckpt.path, opened_ckpt.meta
    out = pathlib.Path(staging_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DraftsmithError(f"{out}: staging folder is not empty; pass a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):  # the only sure test (root passes os.access; read-only mounts do not)
            pass
    except OSError as e:
        raise DraftsmithError(
            f"--stage-dir {out}: cannot write there ({e.strerror or e}); pass a writable new or empty folder"
        ) from None
    applies = formats_for(meta["kind"])
    root = root_format(applies)  # its export is the repo root; the checkpoint moves to draftsmith/
    home = out / CHECKPOINT_DIR if root else out
    for src in sorted(ckpt.rglob("*")):
        rel = src.relative_to(ckpt)
        if src.is_file() and not (NOT_PUBLISHED & set(rel.parts)) and not any(p.startswith(".") for p in rel.parts):
            _place(src, home / rel)
    k = results[-1].get("num_speculative_tokens") if results else None  # the measured K, else export's default
    exports = {}
    from draftsmith.shipping.engines import installed

    for f in (f for f in _staged_formats() if f.name in applies):  # "hf": the checkpoint itself
        fmt = f.name
        dest = out / (f".{fmt}-root" if fmt == root else fmt)
        if f.requires:  # optional: written by an engine's own tool (llama.cpp's converter), which must be installed
            why, label = f.requires_note or f"{f.requires} is not installed here", f.label or f.engine
            try:
                folder = export(opened_ckpt, fmt, dest, num_speculative_tokens=k) if installed(f.requires) else None
            except DraftsmithError as e:
                folder, why = None, str(e)
            if folder is None:
                print(f"note: no {label} staged: {why}")
                exports[fmt] = {
                    "missing": f"No {label} in this repo: {why}. `draftsmith export --format {fmt}` writes one."
                }
                continue
        else:
            folder = export(opened_ckpt, fmt, dest, num_speculative_tokens=k)
        exports[fmt] = _published(folder, fmt, repo_id if fmt == root else None, bool(root))
        if fmt == root:
            _lift(folder, out)
    for name, src in (("recipe.yaml", ckpt.parent / "recipe.yaml"), ("train_summary.json", run_summary(ckpt, meta)[0])):
        if src is not None and src.is_file() and not (out / name).exists():
            _place(src, out / name)
    used = set()
    for i, r in enumerate(results):
        stem = pathlib.Path(r.get("_source") or f"result-{i}.json").stem
        name = stem if stem not in used else f"{stem}-{i}"
        used.add(name)
        (out / "results").mkdir(exist_ok=True)
        write_json(out / "results" / f"{name}.json", {k: v for k, v in r.items() if k != "_source"})
    (out / "README.md").write_text(build_card(opened_ckpt, results, repo_id, license=license, exports=exports))
    return sorted(p for p in out.rglob("*") if p.is_file())


def _token(token: str | None) -> str:
    import huggingface_hub

    token = token or huggingface_hub.get_token()
    if not token:
        raise DraftsmithError(
            "no Hugging Face token: run `hf auth login` (or `huggingface-cli login`), or set HF_TOKEN "
            "to a token with write access; --dry-run needs none"
        )
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise DraftsmithError("HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set: unset it to publish, or use --dry-run")
    return token


def _hub_error(e: Exception, what: str, token: str) -> DraftsmithError:
    msg = (str(e).splitlines() or [""])[0].replace(token, "***")  # never echo the token
    return DraftsmithError(f"{what} failed: {type(e).__name__}: {msg}")


def _whoami(token: str) -> str:
    from huggingface_hub import HfApi

    try:
        return HfApi(token=token).whoami()["name"]
    except Exception as e:  # noqa: BLE001
        raise _hub_error(e, "asking the Hub whose token this is", token) from None


def publish(
    checkpoint,
    repo_id: str | None = None,
    private: bool = False,
    dry_run: bool = False,
    results: list[dict] | None = None,
    token: str | None = None,
    *,
    license: str | None = None,
    stage_dir=None,
) -> dict:
    """Create `repo_id` (exist_ok) and upload the staged folder in one commit; `dry_run`: stage
    only, no token, no network. -> repo_id, files (repo paths), sizes, card, results, url, commit_url.
    The checkpoint is opened once (a folder, or a Checkpoint already opened) and handed on to the
    staging, every export and the card."""
    from draftsmith.shipping.export import default_repo_name

    opened_ckpt = opened(checkpoint)
    ckpt, meta = opened_ckpt.path, opened_ckpt.meta
    repo_id = repo_id or default_repo_name(opened_ckpt)
    if not re.fullmatch(r"([A-Za-z0-9][\w.-]{0,95}/)?[\w.-]{1,96}", repo_id) or ".." in repo_id or "--" in repo_id:
        raise DraftsmithError(f"--repo-id {repo_id!r}: expected ORG/NAME (letters, digits, '-', '_', '.')")
    if results is None:
        results = []
        for r in load_results(find_results(ckpt)):  # found beside it: a stale one (retrained since) is left out
            why = foreign_result(r, ckpt, meta, opened_ckpt.identity)
            if why:
                log.info("%s: not used for the card: %s", r["_source"], why)
            else:
                results.append(r)
    else:
        check_results(ckpt, meta, results, opened_ckpt.identity)
    if not dry_run:
        token = _token(token)
        if "/" not in repo_id:  # the card names the full id: ask the Hub whose token this is
            repo_id = _whoami(token) + "/" + repo_id
    with tempfile.TemporaryDirectory(prefix="draftsmith-publish-") as tmp:
        folder = pathlib.Path(stage_dir) if stage_dir else pathlib.Path(tmp)
        card_id = repo_id if "/" in repo_id else f"YOUR-ACCOUNT/{repo_id}"  # dry run without a namespace
        paths = stage(opened_ckpt, card_id, results, folder, license=license)
        files = [p.relative_to(folder).as_posix() for p in paths]
        info = {
            "repo_id": repo_id,
            "private": private,
            "dry_run": dry_run,
            "files": files,
            "sizes": {f: p.stat().st_size for f, p in zip(files, paths)},
            "card": (folder / "README.md").read_text(),
            "results": [r.get("_source") for r in results],
            "url": None,
            "commit_url": None,
        }
        if dry_run:
            return info
        from huggingface_hub import CommitOperationAdd, HfApi

        try:
            api = HfApi(token=token)
            url = api.create_repo(repo_id, private=True if private else None, repo_type="model", exist_ok=True)
            ops = [CommitOperationAdd(path_in_repo=f, path_or_fileobj=str(p)) for f, p in zip(files, paths)]
            commit = api.create_commit(
                url.repo_id,
                ops,
                commit_message=f"draftsmith publish: {meta['kind']} drafter "
                f"for {target_facts(meta)['name']} (step {meta.get('step', '?')})",
            )
        except Exception as e:  # HTTP, connection, card validation: one line
            raise _hub_error(e, f"publishing to {repo_id}", token) from None
        info.update(repo_id=url.repo_id, url=str(url), commit_url=commit.commit_url)
        return info


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "checkpoint",
        help="a checkpoint folder written by `draftsmith train` (runs/NAME/final), or the run folder runs/NAME "
        "(its best/ checkpoint when it has one, else final/)",
    )
    parser.add_argument(
        "--repo-id",
        default=None,
        help="ORG/NAME on the Hub (default: NAME from the target and method, under your account)",
    )
    parser.add_argument(
        "--private", action="store_true", help="create the repo private (an existing repo keeps its visibility)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list every file and print the card; no token, no network"
    )
    parser.add_argument(
        "--results",
        action="append",
        default=None,
        metavar="JSON",
        help="a `draftsmith bench/eval --json` file for the card's table (repeatable; default: "
        "those beside the checkpoint or in its run folder that name it)",
    )
    parser.add_argument(
        "--license", default=None, help="license id for the card (default: the built-in target's, else 'other')"
    )
    parser.add_argument(
        "--stage-dir", default=None, help="build the upload folder here and keep it (new or empty folder)"
    )


def run(args) -> int:
    """The `draftsmith publish` command (raises DraftsmithError: wire it through run_command)."""
    results = load_results(args.results) if args.results else None
    info = publish(
        args.checkpoint,
        args.repo_id,
        private=args.private,
        dry_run=args.dry_run,
        results=results,
        license=args.license,
        stage_dir=args.stage_dir,
    )
    where = info["repo_id"] if "/" in info["repo_id"] else f"<your account>/{info['repo_id']}"
    head = "dry run: would create" if info["dry_run"] else "created (or reused)"
    print(
        f"{head} {where} ({'private' if info['private'] else 'public'}) and upload {len(info['files'])} files, "
        f"{_size(sum(info['sizes'].values()))}:"
    )
    for f in info["files"]:
        print(f"  {f:<48} {_size(info['sizes'][f]):>10}")
    print(
        "results: " + (", ".join(info["results"]) if info["results"] else "none (the card says nothing was measured)")
    )
    if info["dry_run"]:
        print("----- README.md -----")
        print(info["card"], end="")
    else:
        print(f"uploaded: {info['url']}  commit {info['commit_url']}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="draftsmith publish", description="upload a trained drafter to the Hugging Face Hub"
    )
    add_arguments(parser)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return run_command(run, parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
