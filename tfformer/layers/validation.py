"""Argument checks shared by every layer and builder, with uniform messages."""

from tfformer.errors import InputError


def check_positive_int(name, value, allow_none=False):
    """Raises ValueError unless `value` is an int > 0 (or None if allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{name} must be a positive int. Received: {name}={value!r}")


def check_rate(name, value, allow_none=False):
    """Raises ValueError unless `value` is a dropout rate in [0, 1)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(
            f"{name} must be a number in [0, 1). Received: {name}={value!r}"
        )
    if not 0.0 <= value < 1.0:
        raise InputError(f"{name} must be in [0, 1). Received: {name}={value!r}")


def check_positive_number(name, value):
    """Raises ValueError unless `value` is a number > 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InputError(
            f"{name} must be a positive number. Received: {name}={value!r}"
        )


def static_dim(dim):
    """`dim` if it is a concrete int, else None.

    Shapes can hold None (TensorFlow) or symbolic dimensions (JAX tracing);
    comparing those is unknown or an error, so checks use only concrete sizes.
    """
    return dim if isinstance(dim, int) else None
