"""`build_data`, the pipeline from a recipe's data section to training rows, held-out rows and
prompts: load, filter, regenerate (optional), hold out, tokenise, pack or pad, each step counted."""

from __future__ import annotations

import logging
from collections import defaultdict

from tqdm.auto import tqdm

from draftsmith.errors import DraftsmithError
from draftsmith.train.config import DataConfig
from draftsmith.train.data import regenerated_file
from draftsmith.train.data.filtering import _filter, _split
from draftsmith.train.data.held_out import _eval_prompts, mix_domains
from draftsmith.train.data.loading import _load
from draftsmith.train.data.packing import _pack, _pad
from draftsmith.train.data.regeneration import regenerate
from draftsmith.train.data.rows import TokenRows, TrainData
from draftsmith.train.data.tokenizing import _encode, _token_id

log = logging.getLogger("draftsmith.train.data")  # the package's logger: its INFO lines keep their name


def build_data(cfg: DataConfig, tokenizer, target=None, progress: bool = True) -> TrainData:
    """Training and held-out rows of `cfg.max_length` tokens, held-out prompts, and counts."""
    saved = regenerated_file.saved_path(cfg)
    if cfg.regenerate and target is None and cfg.regenerate_with != "endpoint" and not (saved and saved.is_file()):
        raise DraftsmithError("data.regenerate needs the target model: pass target= to build_data")
    raw, fmt, loader_stats = _load(cfg)
    if fmt == "chat" and getattr(tokenizer, "chat_template", None) is None:
        raise DraftsmithError(f"dataset {cfg.path!r} is chat data but the tokenizer has no chat template")
    if cfg.regenerate and fmt != "chat":
        raise DraftsmithError(f"data.regenerate needs chat data; dataset {cfg.path!r} is text")
    stats = _counter(fmt, rows_read=len(raw), **loader_stats)
    rows = _filter(raw, fmt, cfg, stats)
    stats["rows_used"] = len(rows)
    log.info("data %s: read %d rows, using %d; %s", cfg.path, len(raw), len(rows), _brief(stats, "skipped_"))
    if cfg.regenerate:  # user turns stay as they were, so held-out prompts are the originals'
        rows, regen_stats = _regenerated(rows, cfg, tokenizer, target, progress)
        stats.update(regen_stats)
    train_rows, eval_rows = _split(rows, cfg)
    stats["train_rows"], stats["eval_rows"] = len(train_rows), len(eval_rows)
    train = _tokenized(train_rows, fmt, tokenizer, cfg, stats, "train", progress)
    evaluation = _tokenized(eval_rows, fmt, tokenizer, cfg, stats, "eval", progress)
    if stats.get("skipped_template"):
        log.warning(
            "data %s: %d chats skipped: the chat template renders their prefixes differently from the whole chat",
            cfg.path,
            stats["skipped_template"],
        )
    if len(train) == 0:
        raise DraftsmithError(f"dataset {cfg.path!r}: no training rows left after tokenising ({_brief(stats)})")
    log.info("data %s: %s", cfg.path, _brief(stats))
    held_out = _eval_prompts(eval_rows, fmt, tokenizer, cfg.path, cfg.chat_template_kwargs)
    prompts = mix_domains(held_out, tokenizer, cfg.path, cfg.chat_template_kwargs)
    return TrainData(train, evaluation, prompts, dict(stats))


def _regenerated(rows: list[dict], cfg: DataConfig, tokenizer, target, progress: bool) -> tuple[list[dict], dict]:
    """The rows with the target's replies: from data.regenerated_path when it exists, else regenerated
    (and written there when it is set)."""
    saved = regenerated_file.saved_path(cfg)
    if saved is not None and saved.is_file():
        return regenerated_file.read_into(rows, saved)
    if cfg.regenerate_with == "endpoint" and not (cfg.regenerate_endpoint and cfg.regenerate_model):
        from draftsmith.train.preflight import regenerate_first

        raise DraftsmithError(regenerate_first("", saved))
    rows, counts = regenerate(rows, cfg, tokenizer, target, progress)
    if saved is not None:
        regenerated_file.write(rows, saved)
    return rows, counts


def _tokenized(
    rows: list[dict], fmt: str, tokenizer, cfg: DataConfig, stats: dict, split: str, progress: bool
) -> TokenRows:
    """One split as fixed-length rows (packed or padded)."""
    with tqdm(total=len(rows), desc=f"tokenising {split}", unit="row", disable=not progress) as bar:
        seqs = _encode(rows, fmt, tokenizer, stats, bar, cfg.chat_template_kwargs)
    if rows and not seqs:
        raise DraftsmithError(
            f"dataset {cfg.path!r}: the chat template renders a chat's prefixes differently "
            f"from the whole chat, so assistant turns cannot be located"
        )
    return (_pack if cfg.pack else _pad)(seqs, cfg.max_length, _token_id(tokenizer, "pad"), stats, split)


def _counter(fmt: str, **initial: int) -> dict[str, int]:
    """Counts that are always reported (zeros included); others appear when they happen."""
    skips = ("skipped_empty", "skipped_no_assistant", "skipped_too_long") if fmt == "chat" else ("skipped_empty",)
    return defaultdict(int, {**initial, **dict.fromkeys(skips, 0)})


def _brief(stats: dict[str, int], prefix: str = "") -> str:
    return ", ".join(f"{k} {v}" for k, v in stats.items() if k.startswith(prefix))
