"""Decoding speed: cached generation against prefix recompute, keras-hub and
the weight-streaming floor."""
