"""One exception type for every user-facing error.

The CLI prints these as a single line (no traceback): the message must name the problem and,
where there is one, the fix.
"""


class DraftsmithError(Exception):
    """A problem with the user's input or environment, explained in the message."""
