"""One exception type for every user-facing error.

The CLI prints these as a single line (no traceback): the message must name the problem and,
where there is one, the fix.
"""


class DraftsmithError(Exception):
    """A problem with the user's input or environment, explained in the message."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C in a command that says itself what it kept (the message: one line, exit 130)."""


def run_command(fn, *args) -> int:
    """Run a CLI command: its exit status (None: 0), or 2 with the DraftsmithError printed as one
    line; Ctrl-C is one line and status 130, not a traceback (work that is resumable, training
    checkpoints and the regeneration cache, is kept by the code that does it)."""
    import sys

    try:
        return fn(*args) or 0
    except DraftsmithError as e:
        print(f"draftsmith: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"draftsmith: interrupted: {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("draftsmith: interrupted (rerun the same command to resume what can be resumed)", file=sys.stderr)
        return 130
