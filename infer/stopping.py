"""When generation ends: EOS, stop strings, max new tokens: one rule for plain and speculative.

Speculative decoding emits several tokens per step; to stop exactly where plain decoding would,
the engine feeds them to `StopCriteria.check` one at a time, in order, and cuts at the first
token that ends generation. The rule only ever looks at the generated tokens so far, so both
paths see the same sequence of calls and stop at the same token.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class StopCriteria:
    def __init__(
        self,
        max_new_tokens: int,
        eos_token_ids: Iterable[int] = (),
        stop_strings: Sequence[str] = (),
        tokenizer=None,
    ):
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if stop_strings and tokenizer is None:
            raise ValueError("stop strings need a tokenizer to decode the generated text")
        self.max_new_tokens = max_new_tokens
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.stop_strings = tuple(s for s in stop_strings if s)
        self.tokenizer = tokenizer
        # A stop string completed by the newest token lies within its last len(s) characters;
        # every token decodes to >= 1 character except rare byte pieces, hence the slack.
        self._window = max((len(s) for s in self.stop_strings), default=0) + 8

    def check(self, generated: Sequence[int]) -> str | None:
        """Why generation stops after the last token of `generated`, or None to go on."""
        if generated[-1] in self.eos_token_ids:
            return "eos"
        if self.stop_strings:
            tail = self.tokenizer.decode(generated[-self._window :], skip_special_tokens=False)
            if any(s in tail for s in self.stop_strings):
                return "stop_string"
        if len(generated) >= self.max_new_tokens:
            return "max_new_tokens"
        return None
