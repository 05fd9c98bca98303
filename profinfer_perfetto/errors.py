"""The one error type the CLI turns into a single sentence and a non-zero exit."""


class ProfinferError(Exception):
    """A problem with the user's input or machine, stated as one sentence."""
