"""Exported forms (SavedModel, TFLite) against the Keras model: size, latency,
parity, memory."""
