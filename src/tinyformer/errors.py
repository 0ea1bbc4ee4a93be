"""The one exception type for mistakes a user can make (bad flag, missing file, ...).

The CLI turns a `UserError` into one line on stderr and exit code 2; anything
else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """A problem with the user's input, explained in one line."""
