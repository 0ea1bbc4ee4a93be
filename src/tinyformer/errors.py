"""The one exception type for mistakes a user can make (bad flag, missing file, ...).

The CLI turns a `UserError` into one line on stderr and exit code 2; anything
else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """A problem with the user's input, explained in one line."""


def quoted(text: str, limit: int = 80) -> str:
    """The user's input as an error line shows it: repr()'d, cut to about `limit` characters."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def first_line(e: Exception) -> str:
    """What a library's exception says, as a one-line error quotes it: its first line, no terminal colour codes,
    at most 200 characters (its type's name when it says nothing)."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
