"""The one reader of a drafter checkpoint folder.

Every checkpoint the trainer writes carries `drafter.json` (its format, kind, target and step,
plus what a kind adds: Medusa-2's fine-tuned `target_path`, best/'s `tau`). A run folder (what
`draftsmith train --output-dir` wrote) stands for one of its checkpoints: best/ (the checkpoint
chosen by measured acceptance) when it holds a drafter.json, else final/.

`Checkpoint.open(path)` resolves a path, reads drafter.json once and names what is wrong in one
line; its config.json is read once on first use, its weights and tokenizer files are read from
here; `Checkpoint.load(target)` checks the checkpoint belongs to that target and builds its
drafter. generate/eval/bench `--draft`, `load_drafter`, export, publish and crosscheck all read
checkpoints here, and a command that opened one hands the object on (`Checkpoint.of` takes a
path or an opened checkpoint) rather than opening the folder again.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import logging
import os
import pathlib

from draftsmith.errors import DraftsmithError
from draftsmith.fileio import first_line, read_json, write_json

DRAFTER_META = "drafter.json"  # in every checkpoint the trainer writes: kind, target, step
DRAFTER_META_FORMAT = 1
RUN_CHECKPOINTS = ("best", "final")  # what a run folder stands for, in order of preference
# Files a tokenizer may consist of (transformers' save_pretrained writes some of these).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "chat_template.jinja",
    "chat_template.json",
)
log = logging.getLogger("draftsmith")


def write_drafter_meta(folder, kind: str, target: str, **extra) -> None:
    meta = {"format": DRAFTER_META_FORMAT, "kind": kind, "target": target, **extra}
    write_json(pathlib.Path(folder) / DRAFTER_META, meta)


def read_drafter_meta(folder) -> dict | None:
    """The checkpoint's `drafter.json`, or None for a folder that is not a draftsmith checkpoint."""
    path = pathlib.Path(folder) / DRAFTER_META
    if not path.is_file():
        return None
    try:
        meta = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DraftsmithError(f"{path}: corrupt checkpoint metadata ({e})") from None
    if not isinstance(meta, dict) or "kind" not in meta:
        raise DraftsmithError(f"{path}: corrupt checkpoint metadata (no 'kind')")
    fmt = meta.get("format", DRAFTER_META_FORMAT)
    if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt < 1:
        raise DraftsmithError(f"{path}: corrupt checkpoint metadata ('format' {fmt!r} is not a format number)")
    if fmt > DRAFTER_META_FORMAT:
        raise DraftsmithError(
            f"{path}: checkpoint metadata format {fmt}, newer than this draftsmith reads (format "
            f"{DRAFTER_META_FORMAT}); upgrade draftsmith to use this checkpoint"
        )
    target = meta.get("target")
    if target is not None and not isinstance(target, str):
        raise DraftsmithError(
            f"{path}: corrupt checkpoint metadata ('target' {target!r} is not a model name or path); "
            'write the target it was trained against there (e.g. "tiny-random" or a Hub id)'
        )
    return meta


def _check_reachable(p: pathlib.Path, flag: str) -> None:
    """A path whose symbolic links go round in a loop is one line, at once (not a wait for the
    Hugging Face Hub to say a model of that name does not exist)."""
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DraftsmithError(
                f"{flag} {p}: a loop of symbolic links (it leads back to itself); point it at a checkpoint folder"
            ) from None


def resolve_checkpoint(path, flag: str = "checkpoint") -> pathlib.Path:
    """The checkpoint a path names. A checkpoint folder (drafter.json) is itself; a run folder is
    its best/ when that holds a drafter.json, else its final/, and one line says which was taken
    (a warning when best/ is there but incomplete). Any other path comes back as given (a model
    name, a .gguf file, a Hub id: the caller decides)."""
    if not isinstance(path, (str, os.PathLike)):
        raise DraftsmithError(f"{flag}: a checkpoint folder's path (str or path), not {type(path).__name__} {path!r}")
    p = pathlib.Path(path).expanduser()
    _check_reachable(p, flag)
    if not p.is_dir() or (p / DRAFTER_META).is_file():
        return p
    skipped = []
    for name in RUN_CHECKPOINTS:
        if (p / name / DRAFTER_META).is_file():
            if skipped:
                log.warning(
                    "warning: %s %s: its %s/ is incomplete (no %s): using its %s/ checkpoint instead",
                    flag,
                    p,
                    "/, ".join(skipped),
                    DRAFTER_META,
                    name,
                )
            else:
                log.info("%s %s is a training run: using its %s/ checkpoint", flag, p, name)
            return p / name
        if (p / name).is_dir():
            skipped.append(name)
    return p


def describe_missing_meta(folder, flag: str) -> str | None:
    """Why `folder` (a folder with no drafter.json) cannot be loaded as a drafter, or None when it
    may be a plain causal LM folder. Says which file is missing instead of a tokenizer's or
    transformers' complaint about a half checkpoint."""
    p = pathlib.Path(folder)
    if not p.is_dir() or (p / DRAFTER_META).is_file():
        return None
    if not any(p.iterdir()):
        return f"{flag} {p}: the folder is empty; name a checkpoint folder (runs/NAME/final) or a model"
    if any(c.is_dir() and (c / DRAFTER_META).is_file() for c in p.iterdir()):
        return f"{flag} {p}: a folder of checkpoints without final/ or best/; name one of them (e.g. {p}/step-N)"
    incomplete = [n for n in RUN_CHECKPOINTS if (p / n).is_dir()]
    if incomplete and not (p / "config.json").is_file():
        return (
            f"{flag} {p}: a training run whose {'/, '.join(incomplete)}/ has no {DRAFTER_META}: "
            "the checkpoint is incomplete; copy the whole run, or name a step-N checkpoint"
        )
    config = p / "config.json"
    if not config.is_file():
        return f"{flag} {p}: neither a draftsmith checkpoint (no {DRAFTER_META}) nor a model folder (no config.json)"
    try:
        model_type = str(json.loads(config.read_text()).get("model_type", ""))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None  # the model loader names a corrupt config.json
    if model_type.startswith("draftsmith_"):  # one of our drafters' configs: a damaged checkpoint
        return (
            f"{flag} {p}: a damaged {model_type.removeprefix('draftsmith_')} checkpoint: {DRAFTER_META} is missing "
            "(it names the kind and the target); copy it back from the run, or pass another checkpoint"
        )
    return None


def _same_model(a: str, b: str) -> bool:
    """Two ways of naming a model (a name, or paths to one folder) name the same one."""
    pa, pb = pathlib.Path(a).expanduser(), pathlib.Path(b).expanduser()
    return a == b or (pa.exists() and pb.exists() and pa.resolve() == pb.resolve())


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A drafter checkpoint folder and its drafter.json, read once (config.json too, on first use)."""

    path: pathlib.Path
    meta: dict

    @classmethod
    def of(cls, checkpoint, flag: str = "checkpoint") -> Checkpoint:
        """`checkpoint` itself when it is an opened Checkpoint, else the one a path names (`open`)."""
        return checkpoint if isinstance(checkpoint, Checkpoint) else cls.open(checkpoint, flag)

    @classmethod
    def find(cls, path, flag: str = "checkpoint") -> Checkpoint | None:
        """The checkpoint `path` names (a run folder resolves to its best/ or final/), or None when
        it names something else a caller may load (a model name, a .gguf file, a model folder).
        A folder that looks like a broken checkpoint is a one-line DraftsmithError."""
        p = resolve_checkpoint(path, flag)
        problem = describe_missing_meta(p, flag)
        if problem:
            raise DraftsmithError(problem)
        meta = read_drafter_meta(p) if p.is_dir() else None
        return None if meta is None else cls(p, meta)

    @classmethod
    def open(cls, path, flag: str = "checkpoint") -> Checkpoint:
        """The checkpoint at `path` (a run folder: its best/ or final/), or one clear error saying
        why it is not one."""
        p = resolve_checkpoint(path, flag)
        if not p.exists():
            raise DraftsmithError(f"{p}: no such checkpoint folder")
        if not p.is_dir():
            raise DraftsmithError(
                f"{p} is a file; name a checkpoint folder written by `draftsmith train` (e.g. runs/NAME/final)"
            )
        meta = read_drafter_meta(p)
        if meta is None:
            hint = ""
            incomplete = [n for n in RUN_CHECKPOINTS if (p / n).is_dir()]
            if incomplete:
                hint = f" (its {'/, '.join(incomplete)}/ lacks {DRAFTER_META}: an incomplete checkpoint)"
            elif any(c.is_dir() and (c / DRAFTER_META).is_file() for c in p.iterdir()):
                hint = " (it holds checkpoints: pass one of its final/ or step-* folders)"
            raise DraftsmithError(
                f"{p}: not a draftsmith checkpoint (no {DRAFTER_META}){hint}; name a folder written by "
                "`draftsmith train`, e.g. runs/NAME/final"
            )
        return cls(p, meta)

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def target(self) -> str | None:
        """The target it was trained against (drafter.json's `target`)."""
        return self.meta.get("target")

    @property
    def target_name(self) -> str:
        """The target as a string for what is written about it (exports, repo names): drafter.json's
        `target`, else config.json's, else ""."""
        return str(self.meta.get("target") or self.config.get("target") or "")

    @property
    def step(self) -> int | None:
        return self.meta.get("step")

    @functools.cached_property
    def config(self) -> dict:
        """The checkpoint's config.json ({} when there is none: export and publish require it
        separately); read once. A corrupt one is a one-line DraftsmithError."""
        cfg = self.path / "config.json"
        if not cfg.is_file():
            return {}
        try:
            config = json.loads(cfg.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DraftsmithError(f"{cfg}: corrupt checkpoint config ({e})") from None
        if not isinstance(config, dict):
            raise DraftsmithError(f"{cfg}: corrupt checkpoint config (not a JSON object)")
        return config

    def weight_files(self) -> list[pathlib.Path]:
        """model.safetensors or the shards its index names (models/weights.py: the one helper)."""
        from .weights import weight_files

        return weight_files(self.path)

    def weights(self) -> dict:
        """Every tensor of the checkpoint's top-level weights, by name (read at each call: a
        caller that needs them twice keeps them; an opened checkpoint does not hold them)."""
        from safetensors.torch import load_file

        out = {}
        for f in self.weight_files():
            try:
                out.update(load_file(str(f)))
            except Exception as e:  # noqa: BLE001 -- safetensors raises its own error types
                raise DraftsmithError(f"{f}: could not read the weights ({type(e).__name__}: {first_line(e)})") from e
        return out

    def tokenizer_files(self) -> list[pathlib.Path]:
        """The tokenizer's files in the folder (TOKENIZER_FILES that are there)."""
        return [self.path / n for n in TOKENIZER_FILES if (self.path / n).is_file()]

    def target_to_load(self) -> tuple[str | None, str | None]:
        """(target, note): the checkpoint's own fine-tuned target when it carries one (Medusa-2
        trains the target too), else the target it was trained against."""
        if self.meta.get("target_path"):
            return (
                str(self.path / self.meta["target_path"]),
                f"fine-tuned with the drafter (Medusa-2) from {self.meta.get('base_target', self.target)}: outputs "
                "are this model's, not the base model's",
            )
        return self.target, None

    def matches_target(self, name: str) -> bool:
        """Whether `name` (a model name or path) is the target this checkpoint was trained for."""
        own = self.target_to_load()[0]
        return own is not None and _same_model(name, own)

    def check_target(self, target_name: str, flag: str = "target") -> bool:
        """Warn, naming both, when `target_name` is not the target this checkpoint was trained for
        (decoding stays lossless; acceptance drops). -> whether it matched."""
        if self.target is None or self.matches_target(target_name):
            return True
        own = self.target_to_load()[0]
        log.warning(
            "warning: %s was trained %s %s; decoding with %s %s instead stays lossless but accepts less",
            self.path,
            "together with its own target" if self.meta.get("target_path") else "against",
            own,
            flag,
            target_name,
        )
        return False

    def load(self, target, flag: str = "target"):
        """This checkpoint's drafter for `target` (its kind's `from_pretrained`), after checking it
        belongs to that target."""
        from draftsmith.kinds import KINDS

        if self.kind not in KINDS:
            raise DraftsmithError(f"{self.path}: a {self.kind!r} checkpoint; this version knows {', '.join(KINDS)}")
        self.check_target(str(target.name), flag)
        return KINDS[self.kind].drafter.from_pretrained(str(self.path), target)

    def identity(self) -> dict:
        """What a result JSON records about the checkpoint it measured (see checkpoint_identity);
        hashed once per opened checkpoint."""
        if "_identity" not in self.__dict__:
            self.__dict__["_identity"] = self._hash()
        return dict(self.__dict__["_identity"])

    def _hash(self) -> dict:
        from .weights import weight_files

        h = hashlib.sha256((self.path / DRAFTER_META).read_bytes())
        from .draft_lm import DRAFT_VOCAB

        vocab = self.path / DRAFT_VOCAB  # it changes what the draft proposes, as its weights do
        for f in [*weight_files(self.path), *([vocab] if vocab.is_file() else [])]:
            h.update(f.name.encode())
            with open(f, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    h.update(chunk)
        return {
            "path": str(self.path.resolve()),
            "kind": self.kind,
            "target": self.target,
            "step": self.step,
            "sha256": h.hexdigest(),
        }


def checkpoint_identity(folder) -> dict | None:
    """What a result JSON records about the checkpoint it measured, so `publish --results` can tell
    whether results belong to a checkpoint: its resolved path, kind, target, step and a sha256
    over drafter.json and the weight files. None for a folder that is not a draftsmith checkpoint."""
    p = pathlib.Path(folder) if folder else None
    meta = read_drafter_meta(p) if p is not None and p.is_dir() else None
    return None if meta is None else Checkpoint(p, meta).identity()


def require_drafter_kind(init, kind: str) -> dict:
    """drafter.json of a recipe's `drafter.init` folder, which must be a checkpoint of `kind`."""
    meta = read_drafter_meta(init) if pathlib.Path(init).is_dir() else None
    if meta is None:
        raise DraftsmithError(f"drafter.init {init}: not a draftsmith checkpoint folder (no drafter.json)")
    if meta["kind"] != kind:
        raise DraftsmithError(
            f"drafter.init {init}: a {meta['kind']!r} checkpoint, but this recipe trains a {kind!r} drafter"
        )
    return meta


__all__ = [
    "DRAFTER_META",
    "TOKENIZER_FILES",
    "Checkpoint",
    "checkpoint_identity",
    "describe_missing_meta",
    "read_drafter_meta",
    "require_drafter_kind",
    "resolve_checkpoint",
    "write_drafter_meta",
]
