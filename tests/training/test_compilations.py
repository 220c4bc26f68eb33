"""XLA compiles once per batch shape, and the input pipeline makes one shape per length bucket:
over an epoch of many batches the per-replica step is traced a bounded number of times."""
import keras
import numpy as np

from t2t_lite.data import pipeline, records
from t2t_lite.models.building import build_model
from t2t_lite.training import trainer
from t2t_lite.training.step import TrainingSteps

from program_runs import TINY_MODEL, hparams_of

BATCHES = 30


def test_traces_and_shapes_are_bounded_by_the_buckets(tmp_path):
    rng = np.random.default_rng(0)
    examples = ({"inputs": rng.integers(2, 12, size=n).tolist() + [1],
                 "targets": rng.integers(2, 12, size=n).tolist() + [1]}
                for n in rng.integers(1, 27, size=1000))
    records.write_shards(examples, records.shard_paths(str(tmp_path), "toy-train", 2))
    hparams = hparams_of(TINY_MODEL, "batch_size=128,max_length=27,length_bucket_step=1.5")
    boundaries = pipeline.bucket_boundaries(27, 8, 1.5) + [27]  # 8, 12, 18, 27
    dataset = pipeline.batched_dataset(str(tmp_path / "toy-train-*"), hparams, training=True,
                                       seed=3).take(BATCHES)
    shapes = {tuple(batch["targets"].shape) for batch in dataset}
    assert len(shapes) == len(boundaries) == 4  # more shapes than the traces allowed below

    model = build_model("transformer", hparams, 12)
    steps = TrainingSteps(model, trainer.make_optimizer(hparams), hparams, jit_compile=True)
    for batch in steps.distribute(dataset):
        steps.train_step(batch)
    # reduce_retracing: after the first shapes the trace is shape-generic; XLA compiles per shape.
    assert steps.replica_gradients.experimental_get_tracing_count() <= 3
    assert steps._train_step.experimental_get_tracing_count() <= 3
    assert keras.ops.convert_to_numpy(steps.optimizer.iterations) == BATCHES
