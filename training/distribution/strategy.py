"""Choosing a tf.distribute strategy by name."""

import itertools
import json
import os

import keras
import tensorflow as tf

from tfformer.errors import InputError
from tfformer.training.distribution.multi_worker import require_private

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


def _cluster_workers():
    """Number of workers named in TF_CONFIG (0 when it is unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError:
        raise InputError(f"TF_CONFIG is not valid JSON. Received: {raw!r}") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


# Group keys each MirroredStrategy of this process may use (see below).
_GROUP_KEYS_PER_STRATEGY = 1000
_mirrored_strategies_made = itertools.count()


def _mirrored_strategy_class():
    """MirroredStrategy with collective group keys of its own.

    Every MirroredStrategy numbers its collective groups from
    `1 + _collective_key_base` (a private class attribute, 0), and
    TensorFlow's collective executor keeps the instances of a process: a
    second strategy on the same devices reuses group 1's instance keys, and
    a second training with a model of other shapes aborts at its first
    all-reduce ("Shape mismatch in the collective instance 100"). Each
    strategy built here starts at its own base.
    """
    require_private(
        tf.distribute.MirroredStrategy,
        "_collective_key_base",
        "a second mirrored training in one process needs collective group "
        "keys apart from the first's",
        check=lambda value: isinstance(value, int),
    )
    base = next(_mirrored_strategies_made) * _GROUP_KEYS_PER_STRATEGY
    return type(
        "MirroredStrategy",
        (tf.distribute.MirroredStrategy,),
        {"_collective_key_base": base},
    )


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
        raise InputError(f"strategy must be one of {STRATEGIES}. Received: {name!r}")
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
        devices = (_checked_devices(devices) if devices else []) or gpus or None
        return _mirrored_strategy_class()(devices=devices)
    if name == "multi_worker":
        if _cluster_workers() < 1:
            raise InputError(
                "strategy='multi_worker' needs TF_CONFIG with a cluster of workers."
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or None)
    except ValueError as e:  # no TPU here, or none of that name
        raise InputError(
            f"strategy='tpu' found no TPU ({e}). Received: train.tpu={tpu!r}"
        ) from None
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _checked_devices(devices):
    """`train.devices` as a list, each a device this process has (a logical
    one: tests split the CPU in two), none twice. TensorFlow would place a
    replica on a missing CPU somewhere else without a word, and a missing GPU
    or a malformed name fail deep inside the first step."""
    present = {}
    for device in tf.config.list_logical_devices():
        spec = tf.DeviceSpec.from_string(device.name)
        present[(spec.device_type, spec.device_index)] = device.name
    seen = {}
    for i, device in enumerate(devices):
        try:
            spec = tf.DeviceSpec.from_string(device)
        except (ValueError, TypeError) as e:
            raise InputError(
                f"train.devices[{i}] must be a device name such as '/cpu:0' or "
                f"'/gpu:1' ({e}). Received: {device!r}"
            ) from None
        key = ((spec.device_type or "").upper(), spec.device_index or 0)
        elsewhere = spec.job not in (None, "localhost") or spec.task not in (None, 0)
        if key not in present or elsewhere or spec.replica not in (None, 0):
            raise InputError(
                f"train.devices[{i}]: this process has no such device; it has "
                f"{sorted(present.values())}. Received: {device!r}"
            )
        if key in seen:
            raise InputError(
                f"train.devices names one device twice: {seen[key]!r} and "
                f"{device!r} (train.devices[{i}])."
            )
        seen[key] = device
    return list(devices)


def strategy_for(train):
    """`build_strategy` of a config's `train` section, refusing executions
    of several steps on mirrored replicas: Keras 3.15's loop of
    `steps_per_execution` steps fails there on TensorFlow 2.21 at its first
    call ("You must feed a value for placeholder tensor ... while/cond"), in
    graph mode and with XLA alike."""
    strategy = build_strategy(train.strategy, devices=train.devices, tpu=train.tpu)
    steps_per_execution = train.steps_per_execution
    mirrored = isinstance(strategy, tf.distribute.MirroredStrategy)
    if mirrored and strategy.num_replicas_in_sync > 1 and steps_per_execution > 1:
        raise InputError(
            "train.steps_per_execution > 1 fails on mirrored replicas (Keras "
            f"{keras.__version__}'s multi-step loop under MirroredStrategy, "
            f"TensorFlow {tf.__version__}): set train.steps_per_execution=1. "
            f"Received: train.steps_per_execution={steps_per_execution} with "
            f"{strategy.num_replicas_in_sync} replicas"
        )
    return strategy


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
