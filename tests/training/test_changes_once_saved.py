"""A resume with other training settings records them in hparams.json's "changes" once the
first checkpoint after the resume holds them: a change that fails before (a NaN loss) leaves
the record as it was, a change that trains is recorded with the step it resumed
from."""
import json

import pytest

from program_runs import SMALL, file_hashes, run, trainer_flags


@pytest.fixture(scope="module")
def data_dir(copy_task_data):
    return copy_task_data(300, 20)


def test_a_failed_change_is_not_recorded_and_a_saved_one_is(data_dir, tmp_path):
    output_dir = tmp_path / "run"
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 2))
    assert code == 0, out
    record = (output_dir / "hparams.json").read_text()
    before = file_hashes(output_dir)

    # Step 3's update makes the weights infinite, step 4's loss NaN; no checkpoint between.
    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 4,
                                              SMALL + ",learning_rate_constant=1e30",
                                              checkpoint_every=10))
    assert code == 2, out
    assert "error: the training loss became NaN or infinite at step 4" in out
    assert (output_dir / "hparams.json").read_text() == record
    changed = {path: digest for path, digest in file_hashes(output_dir).items()
               if before.get(path) != digest}
    assert all(path.startswith(("train/", "eval/")) for path in changed), changed  # events

    code, out = run("trainer", *trainer_flags(data_dir, output_dir, 3,
                                              SMALL + ",learning_rate_constant=0.5"))
    assert code == 0, out
    description = json.loads((output_dir / "hparams.json").read_text())
    assert description["hparams"] == json.loads(record)["hparams"]
    assert description["changes"] == [{"step": 2, "hparams": {"learning_rate_constant": 0.5}}]
