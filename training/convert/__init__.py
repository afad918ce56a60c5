"""Checkpoints from other libraries into tfformer run directories
(`tfformer-convert`)."""

from tfformer.training.convert.huggingface import convert

__all__ = ["convert"]
