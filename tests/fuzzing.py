"""Hypothesis settings for the fuzz tests of served signatures.

Each such test calls an exported model once per example and checks every
input of it against a reference (Keras, the run's tokenizer, Hugging Face's),
so its time grows with the inputs sent. The fuzz tests are in the
integration tier (`-m integration`), which runs `DEFAULT_EXAMPLES` examples
each; `TFFORMER_FUZZ=full` runs the count each test asks for (the thorough
run). Tests that are themselves the thorough run
(marked `slow`) pass `reduce=False`. Any other value of `TFFORMER_FUZZ` is
refused, so a typo cannot shrink the thorough run.

An example is a batch of `BATCH` inputs (a served signature takes a batch,
and inputs of every kind padded together in one call is what a server
sees), so 50 examples send at least 1,000 generated inputs through each
fuzzed signature. The empty batch has a test of its own
beside each fuzz test.
"""

import os

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES = 50
BATCH = {"min_size": 20, "max_size": 24}


def fuzz_examples(full, reduce=True):
    """`full` under `TFFORMER_FUZZ=full` or without `reduce`, else at most
    `DEFAULT_EXAMPLES`."""
    mode = os.environ.get("TFFORMER_FUZZ", "")
    if mode not in ("", "full"):
        raise ValueError(f"TFFORMER_FUZZ must be 'full' or unset. Received: {mode!r}")
    return full if mode == "full" or not reduce else min(full, DEFAULT_EXAMPLES)


def fuzz_settings(full, reduce=True):
    """`settings` for a fuzz test over a module-scoped served model: no
    deadline (the first call may trace), and the fixture-scope and slowness
    health checks off (the fixture is deliberately shared, and slow)."""
    return settings(
        max_examples=fuzz_examples(full, reduce),
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
        ],
    )
