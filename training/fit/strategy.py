"""Choosing a tf.distribute strategy by name."""

import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def _cluster_workers():
    """Number of workers named in TF_CONFIG (0 when it is unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError:
        raise ValueError(f"TF_CONFIG is not valid JSON. Received: {raw!r}") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def build_strategy(name="auto", *, devices=(), tpu=""):
    """A `tf.distribute.Strategy` for `name`.

    - auto: multi_worker when TF_CONFIG names several workers, mirrored when
      several GPUs are visible, otherwise one_device.
    - one_device: the first GPU, or the CPU.
    - mirrored: synchronous replicas on `devices` (default: every GPU).
    - multi_worker: `MultiWorkerMirroredStrategy`, cluster from TF_CONFIG.
    - tpu: `TPUStrategy` on `TPUClusterResolver(tpu)`.
    """
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}. Received: {name!r}")
    # Physical, not logical, devices: listing logical ones would initialize the
    # runtime, after which MultiWorkerMirroredStrategy can no longer be set up.
    gpus = [f"/gpu:{i}" for i, _ in enumerate(tf.config.list_physical_devices("GPU"))]
    if name == "auto":
        if _cluster_workers() > 1:
            name = "multi_worker"
        elif len(gpus) > 1:
            name = "mirrored"
        else:
            name = "one_device"
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0] if gpus else "/cpu:0")
    if name == "mirrored":
        devices = list(devices) or gpus or None
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        if _cluster_workers() < 1:
            raise ValueError(
                "strategy='multi_worker' needs TF_CONFIG with a cluster of workers."
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or None)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def is_multi_worker(strategy):
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def is_chief(strategy):
    """True on the worker that writes checkpoints, logs and exports."""
    if not is_multi_worker(strategy):
        return True
    resolver = strategy.cluster_resolver
    return resolver.task_type in ("chief", None) or (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )
