"""Checkpoints from other libraries into tfformer run directories
(`tfformer-convert`): `huggingface`, one module per architecture."""

from tfformer.training.convert.huggingface import convert

__all__ = ["convert"]
