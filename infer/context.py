"""Does a request fit the target? Prompt + max_new_tokens + the tokens one step may draft must not
exceed the target's positions (`max_position_embeddings`): past them a model's numbers mean nothing.
The runtime's own check (Engine.generate) and the prompt sets' (which may keep a prompt's last
tokens instead) say it in the same words."""

from __future__ import annotations

from dataclasses import replace

from draftsmith.errors import DraftsmithError


class ContextFit:
    """Makes each prompt fit the target's positions: prompt + max_new_tokens + the tokens one
    step may draft must not exceed `max_position_embeddings` (past it a model's numbers mean
    nothing). Refuses with one line, or keeps the prompt's last tokens when `truncate` is set."""

    def __init__(
        self,
        max_positions: int | None,
        max_new_tokens: int,
        draft_tokens: int = 0,
        truncate: bool = False,
        model: str = "the target",
        truncate_flag: str | None = "--truncate-prompts",
        draft_flag: str = "-k/--num-speculative-tokens",
    ):
        self.max_positions, self.max_new_tokens, self.draft_tokens = max_positions, max_new_tokens, draft_tokens
        self.truncate, self.model, self.truncate_flag, self.draft_flag = truncate, model, truncate_flag, draft_flag

    def __call__(self, p, where: str):
        """`p` (a prompt dataclass with `.ids`), refused or shortened to fit."""
        keep = self.keep(len(p.ids), where)
        return p if keep >= len(p.ids) else replace(p, ids=p.ids[-keep:])

    def keep(self, n: int, where: str) -> int:
        """How many of a prompt's `n` tokens fit (all of them, or its last ones when truncating)."""
        if not self.max_positions:
            return n
        reserve = self.max_new_tokens + self.draft_tokens
        budget = self.max_positions - reserve
        drafts = f" and {self.draft_tokens} draft tokens" if self.draft_tokens else ""
        if budget < 1 and self.draft_tokens and self.max_new_tokens < self.max_positions:
            raise DraftsmithError(  # --max-new-tokens alone would fit: the drafts are what leave no room
                f"{self.draft_flag} asks for {self.draft_tokens} draft tokens per step: with --max-new-tokens "
                f"{self.max_new_tokens} they leave no room for a prompt in {self.model}'s {self.max_positions:,} "
                f"positions (max_position_embeddings): lower {self.draft_flag.split('/')[-1]}"
            )
        if budget < 1:
            raise DraftsmithError(
                f"--max-new-tokens {self.max_new_tokens}{drafts} leave{'s' if not drafts else ''} no room for a "
                "prompt in "
                f"{self.model}'s {self.max_positions:,} positions (max_position_embeddings): lower --max-new-tokens"
            )
        if n <= budget:
            return n
        if self.truncate:
            return budget  # the end holds the question and the generation prompt
        raise DraftsmithError(
            f"prompt {where} has {n:,} tokens; with --max-new-tokens {self.max_new_tokens}{drafts} it needs "
            f"{n + reserve:,} positions, but {self.model} has {self.max_positions:,} "
            f"(max_position_embeddings): shorten it"
            + (
                f", lower --max-new-tokens, or pass {self.truncate_flag} to keep its last {budget:,} tokens"
                if self.truncate_flag
                else " or lower --max-new-tokens"
            )
        )


__all__ = ["ContextFit"]
