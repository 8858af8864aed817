"""The one error type a user sees.

Anything raised as `ScaleRLError` is printed by the CLI as a single line
(`scalerl: error: <message>`) with a non-zero exit and no traceback. The message must
name the file, field or value at fault and say what was expected.
"""


class ScaleRLError(Exception):
    """A user-facing error: bad input, bad config, a run that cannot continue."""
