"""Which tf.distribute strategy a training run uses, and which worker speaks for it.

- `TF_CONFIG` naming two or more workers: MultiWorkerMirroredStrategy, one process per worker,
  gradients summed across processes with collective ops (tensor2tensor's `--worker_gpu` /
  `--ps_*` flags, the TF 2 way).
- Otherwise MirroredStrategy over the chosen devices (default: every GPU, else every logical
  CPU) when there are two or more, and the default strategy for one.

Only the chief (task "chief", or worker 0 when there is none) writes what users read:
TensorBoard events, hparams.json and the checkpoints in `output_dir`. The other workers take
part in every step and every save, but save into a private directory that is deleted.
"""
import json
import os

import tensorflow as tf

from t2t_lite.storage import atomic_files
from t2t_lite.errors import UserError


class DistributionError(UserError, ValueError):
    """A device list or TF_CONFIG that cannot make a strategy."""


def cluster_workers() -> int:
    """The number of processes TF_CONFIG describes (0 without TF_CONFIG)."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except (json.JSONDecodeError, AttributeError) as error:
        raise DistributionError(f"TF_CONFIG is not a JSON object with a cluster: {error}")
    return sum(len(cluster.get(task, [])) for task in ("chief", "worker"))


def choose_strategy(devices: list = None):
    """MultiWorkerMirroredStrategy under a multi-worker TF_CONFIG; else MirroredStrategy over
    `devices` (names such as "GPU:0"; default all GPUs, else all logical CPUs) when there are
    several; else the default strategy. Call it before other TensorFlow work: the multi-worker
    strategy must be created first in the process."""
    if cluster_workers() > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if devices:
        known = {device.name.split("device:")[-1] for device in tf.config.list_logical_devices()}
        unknown = [device for device in devices if device.split("device:")[-1] not in known]
        if unknown:
            raise DistributionError(f"--devices: no device {', '.join(unknown)} on this machine; "
                                    f"there are {', '.join(sorted(known))}")
    else:
        found = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        devices = [device.name for device in found]
    if len(devices) > 1:
        return tf.distribute.MirroredStrategy(devices)
    if devices and devices[0].split("device:")[-1] != "CPU:0":
        return tf.distribute.OneDeviceStrategy(devices[0])
    return tf.distribute.get_strategy()


def agreed(strategy, flags: list) -> list:
    """For each of `flags`, whether it holds in any process of the run: one all-reduce across
    workers, so that every worker takes the same decision (one that stopped alone would leave
    the others waiting in the next step's all-reduce); the flags themselves in one process."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return [bool(flag) for flag in flags]
    votes = strategy.run(lambda: tf.constant([float(flag) for flag in flags]))
    summed = strategy.reduce(tf.distribute.ReduceOp.SUM, votes, axis=None).numpy()
    return [bool(vote > 0) for vote in summed]


def is_chief(strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return resolver.task_type == "chief" or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


class CheckpointDirectory:
    """`output_dir` for the chief; for each other worker, which must save too (the save is
    collective) but whose copies nobody reads, a hidden folder of its own inside output_dir
    (`.worker_1.incomplete`), removed when training ends. It lives on output_dir's file system
    (tf.io.gfile), as in TensorFlow's multi-worker guide. Use as a context."""

    def __init__(self, output_dir: str, strategy):
        self.chief = is_chief(strategy)
        if self.chief:
            self.path = output_dir
        else:
            resolver = strategy.cluster_resolver
            self.path = atomic_files.temporary_path(
                tf.io.gfile.join(output_dir, f"{resolver.task_type}_{resolver.task_id}"))

    def __enter__(self):
        if not self.chief:
            atomic_files.remove_tree_if_exists(self.path)  # a killed run's copies
            tf.io.gfile.makedirs(self.path)
        return self.path

    def __exit__(self, *exc_info):
        if not self.chief:
            atomic_files.remove_tree_if_exists(self.path)
