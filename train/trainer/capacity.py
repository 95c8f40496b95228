"""The capacity check: a drafter kind must be able to learn a handful of the target's own replies.

Trained on nothing but the target's greedy replies to a few prompts, a drafter that then drafts
for those same prompts meets only contexts it was trained on: the target's next tokens are what
it learned, so its mean_acceptance_length τ should come close to K + 1 (every draft accepted, plus
the bonus token). A kind that stays below the bar, `BAR` x (K + 1), cannot fit even its training
data, which no amount of data or compute fixes: a defect in its model, its loss or its runtime
path (a shifted label, a mask, a position offset, a feature from the wrong layer).

The check runs the product's own path end to end: the target decodes the replies (the Engine,
plain greedy); the trainer (train/trainer/loop.py) trains the kind's recipe on exactly those token
sequences, the prompt masked out of the loss as a chat's user turn is; the checkpoint it writes
loads as a user loads it (`load_drafter`); the Engine decodes the prompts again with it at the
kind's default K (draftsmith/kinds.py, within the drafter's cap), greedy, whose outputs must equal
the replies token for token. The token sequences go to the trainer as they are, not as text: a
reply of a small or random target need not be valid UTF-8, and a text round trip would change it.
"""

from __future__ import annotations

import pathlib
from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from draftsmith.errors import DraftsmithError

BAR = 0.8  # share of the most a chain of K can reach (K + 1) that a kind must reach on its training data


@dataclass
class CapacityResult:
    """What one kind reached on one target: τ per prompt and pooled (1 + accepted / drafts over all
    prompts, as infer/metrics.py defines it), against the bar."""

    kind: str
    num_speculative_tokens: int
    mean_acceptance_length: float
    per_prompt: list[float]
    bar: float
    steps: int
    outputs_match_target: bool  # speculative greedy outputs equal the target's own replies
    train_loss: float | None = None  # the last logged training loss
    train_seconds: float | None = None
    per_position_acceptance: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.outputs_match_target and self.mean_acceptance_length >= self.bar

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def prompt_ids(target, num_prompts: int, prompts="chat") -> list[list[int]]:
    """The first `num_prompts` prompts, tokenised with the target's chat template: of a prompt set
    (draftsmith/evaluation/prompts.py: a built-in set, a file...; the built-in `chat` by default),
    or of a list of user messages."""
    from draftsmith.evaluation.prompts import load_prompts, render_chat

    if isinstance(prompts, str):
        return [p.ids for p in load_prompts(prompts, target.tokenizer, limit=num_prompts)]
    chats = [[{"role": "user", "content": text}] for text in prompts[:num_prompts]]
    return [render_chat(target.tokenizer, chat, "capacity prompts")[1] for chat in chats]


def greedy_replies(target, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """The target's own greedy continuation of each prompt (plain decoding, EOS included when it
    stops there)."""
    from draftsmith.infer import Engine

    engine = Engine(target)
    return [engine.generate(ids, max_new_tokens).tokens for ids in prompts]


def reply_rows(prompts: list[list[int]], replies: list[list[int]], pad_id: int):
    """Training rows (train/data's TrainData) of prompt + reply, one per prompt, right-padded to
    the longest; only the reply's tokens are trained, as only a chat's assistant turns are. The
    held-out rows are the same rows: the final evaluation then reports how well they were fit."""
    from draftsmith.train.data import TrainData
    from draftsmith.train.data.packing import _pad

    seqs = [
        (np.asarray([*p, *r], dtype=np.int32), np.asarray([0] * len(p) + [1] * len(r), dtype=np.uint8))
        for p, r in zip(prompts, replies)
    ]
    stats: dict[str, int] = defaultdict(int)
    length = max(len(ids) for ids, _ in seqs)
    rows = _pad(seqs, length, pad_id, stats, "train")
    return TrainData(train=rows, eval=rows, eval_prompts=[], stats=dict(stats))


def capacity_recipe(
    recipe_path, target, output_dir, *, steps: int, lr: float | None, rows: int, length: int, overrides=()
):
    """The kind's recipe (`recipe_path`: its drafter section is what is checked) set to train on
    `rows` rows of `length` tokens, all of them in every batch, for `steps` steps at `lr` (None:
    the recipe's), with no periodic evaluation or checkpoint, for `target` in its dtype.
    `overrides`: further `--section.key=value` items, applied last."""
    from draftsmith.train.config import load_recipe

    dtype = str(target.dtype).removeprefix("torch.")
    items = [
        f"--model.target={target.name}",
        f"--model.target_dtype={dtype}",
        "--data.regenerate=false",
        "--data.source=corpus",
        f"--data.max_length={max(length, 8)}",
        f"--optim.max_steps={steps}",
        f"--optim.warmup_steps={min(steps // 10, 10)}",
        f"--optim.batch_size={rows}",
        "--optim.grad_accum=1",
        "--optim.max_minutes=null",
        f"--checkpoint.output_dir={output_dir}",
        "--checkpoint.save_every=0",
        "--checkpoint.resume=false",
        f"--logging.log_every={steps}",
        "--logging.eval_every=0",
        "--logging.eval_batches=1",
        "--logging.acceptance_every=0",
        "--logging.acceptance_prompts=0",
        "--logging.trackers=[]",
        "--logging.progress=false",
        *([f"--optim.lr={lr}"] if lr is not None else []),
        *overrides,
    ]
    return load_recipe(recipe_path, items)


def decode_with(target, drafter, prompts: list[list[int]], replies: list[list[int]]) -> dict:
    """Each prompt decoded by the Engine with `drafter` at its kind's default K (greedy, as many
    tokens as its reply) -> K, τ per prompt and pooled, per-position acceptance, and whether
    every output equals its reply."""
    from draftsmith.infer import Engine
    from draftsmith.infer.metrics import SpecMetrics

    engine = Engine(target, drafter)
    total, taus, match = SpecMetrics(), [], True
    for ids, reply in zip(prompts, replies):
        out = engine.generate(ids, len(reply))
        match = match and out.tokens == reply
        taus.append(out.metrics.mean_acceptance_length)
        total = total.merge(out.metrics)
    return {
        "k": engine.k,
        "tau": total.mean_acceptance_length,
        "per_prompt": taus,
        "per_position": total.per_position_acceptance,
        "match": match,
    }


def check_capacity(
    target,
    kind: str,
    recipe_path,
    output_dir,
    *,
    num_prompts: int = 4,
    max_new_tokens: int = 32,
    steps: int = 200,
    lr: float | None = None,
    prompts="chat",
    overrides=(),
) -> CapacityResult:
    """Train `kind` (its recipe at `recipe_path`) on `target`'s greedy replies to the first
    `num_prompts` prompts of `prompts`, `max_new_tokens` each, for `steps` steps; decode those
    prompts with the checkpoint -> a CapacityResult (its `passed`: τ >= BAR x (K + 1) and the
    outputs equal to the replies). The trainer writes its run to `output_dir`."""
    from draftsmith.kinds import get_kind
    from draftsmith.models import load_drafter
    from draftsmith.train.data.tokenizing import _token_id
    from draftsmith.train.trainer.loop import train

    if not get_kind(kind).trainable:
        raise DraftsmithError(f"the capacity check trains a drafter: {kind!r} has nothing to train")
    ids = prompt_ids(target, num_prompts, prompts)
    replies = greedy_replies(target, ids, max_new_tokens)
    data = reply_rows(ids, replies, _token_id(target.tokenizer, "pad"))
    length = int(data.train.input_ids.shape[1])
    recipe = capacity_recipe(
        recipe_path, target, output_dir, steps=steps, lr=lr, rows=len(ids), length=length, overrides=overrides
    )
    if recipe.drafter.kind != kind:
        raise DraftsmithError(f"recipe {recipe_path} trains a {recipe.drafter.kind} drafter, not {kind}")
    summary = train(recipe, data=data)
    if summary.get("interrupted"):
        raise DraftsmithError(
            f"the capacity check's training of {kind} was stopped (SIGTERM) at step {summary['steps']}"
        )
    drafter = load_drafter(summary["final_checkpoint"], target)
    got = decode_with(target, drafter, ids, replies)
    losses = [h["train/loss"] for h in summary.get("history", []) if "train/loss" in h]
    return CapacityResult(
        kind=kind,
        num_speculative_tokens=got["k"],
        mean_acceptance_length=got["tau"],
        per_prompt=got["per_prompt"],
        bar=BAR * (got["k"] + 1),
        steps=summary["steps"],
        outputs_match_target=got["match"],
        train_loss=losses[-1] if losses else None,
        train_seconds=summary.get("train_seconds"),
        per_position_acceptance=got["per_position"],
    )


def recipe_for(configs: pathlib.Path, target_name: str, kind: str) -> pathlib.Path:
    """The kind's recipe for a target: configs/<target>/<kind>.yaml, else the smoke recipe
    configs/tiny/<kind>.yaml (its drafter section fits any target)."""
    own = pathlib.Path(configs) / target_name / f"{kind}.yaml"
    return own if own.is_file() else pathlib.Path(configs) / "tiny" / f"{kind}.yaml"


__all__ = ["BAR", "CapacityResult", "capacity_recipe", "check_capacity", "greedy_replies", "recipe_for", "reply_rows"]
