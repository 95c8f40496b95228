"""One exception type for every user-facing error.

The CLI prints these as a single line (no traceback): the message must name the problem and,
where there is one, the fix.
"""


class DraftsmithError(Exception):
    """A problem with the user's input or environment, explained in the message."""


def run_command(fn, *args) -> int:
    """Run a CLI command: its exit status (None: 0), or 2 with the DraftsmithError printed as one line."""
    import sys

    try:
        return fn(*args) or 0
    except DraftsmithError as e:
        print(f"draftsmith: error: {e}", file=sys.stderr)
        return 2
