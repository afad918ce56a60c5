"""Incremental decoding: greedy, beam search (GNMT length penalty), sampling."""

from tfformer.decoding.generator import Generator, gnmt_length_penalty
from tfformer.decoding.sampling import filter_logits

__all__ = ["Generator", "filter_logits", "gnmt_length_penalty"]
