"""Config overrides that shrink a run to seconds; shared by the training tests."""

# A one-layer, 32-wide model of any family.
TINY_MODEL = [
    "model.num_layers=1",
    "model.hidden_dim=32",
    "model.num_heads=2",
    "model.intermediate_dim=64",
]

# The number-words task with a small vocabulary and two length buckets.
TINY_NUMBER_WORDS = [
    "data.vocabulary_size=300",
    "data.max_length=32",
    "data.bucket_lengths=[16,32]",
    *TINY_MODEL,
    "train.batch_size=16",
]
