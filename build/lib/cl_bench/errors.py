"""The one exception type that means "the user asked for something we cannot do"."""


class UserError(Exception):
    """A problem the user can fix: the CLI prints its message as one line and exits non-zero."""
