"""The exception tfformer raises for input its caller got wrong.

Every error tfformer raises on purpose about what it was given (an argument,
a config setting, a file a command reads, a checkpoint from elsewhere) is an
`InputError`, whose message names the argument or file and what was
received. The commands print an `InputError` as one line and exit with
status 2; any other exception is a fault in tfformer or below it and keeps
its traceback.

`InputError` is a `ValueError`, and `InputTypeError` (a wrong type) is also
a `TypeError`, so code that catches those keeps working.
"""


class InputError(ValueError):
    """Input that cannot be used: the message says which and why."""


class InputTypeError(InputError, TypeError):
    """Input of the wrong type: the message names the argument and the type
    it received."""
