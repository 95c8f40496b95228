"""The chat template's switches a measuring command renders its prompts with (Qwen3's
`enable_thinking`): the checkpoint's record of what it trained with, or the flag. No torch: the
commands' parsers take the flag's name and help from here."""

from __future__ import annotations

import json

from draftsmith.errors import DraftsmithError

TEMPLATE_FLAG = "--chat-template-kwargs"
TEMPLATE_HELP = (
    "the chat template's keyword arguments as JSON, e.g. '{\"enable_thinking\": false}'; default: those the "
    "checkpoint was trained with (its recipe's data.chat_template_kwargs), '{}' for none"
)


def chosen_template(flag: str | None, meta: dict | None) -> tuple[dict, str]:
    """(the chat template's switches, where they come from): the flag's JSON object, else the
    checkpoint's record (drafter.json's chat_template_kwargs), else none."""
    if flag is not None:
        try:
            value = json.loads(flag)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise DraftsmithError(
                f"{TEMPLATE_FLAG} {flag!r}: expected a JSON object, e.g. '{{\"enable_thinking\": false}}'"
            )
        return value, TEMPLATE_FLAG
    recorded = (meta or {}).get("chat_template_kwargs")
    if isinstance(recorded, dict) and recorded:
        return dict(recorded), "checkpoint"
    return {}, "none"


def template_line(kwargs: dict, source: str) -> str:
    """The one line the measuring commands print about the template they rendered with."""
    shown = json.dumps(kwargs) if kwargs else "none"
    why = {"checkpoint": "as the checkpoint was trained", TEMPLATE_FLAG: TEMPLATE_FLAG}.get(source, "none recorded")
    return f"chat template switches: {shown} ({why})"
