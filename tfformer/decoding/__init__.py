"""Incremental decoding: greedy, beam search (GNMT length penalty), sampling."""

from tfformer.decoding.generator import Generator, gnmt_length_penalty
from tfformer.decoding.sampling import filter_logits
from tfformer.decoding.session import DecodingSession

__all__ = ["DecodingSession", "Generator", "filter_logits", "gnmt_length_penalty"]
