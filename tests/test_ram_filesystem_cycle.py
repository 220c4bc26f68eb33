"""A whole run on a file system other than the local disk: TensorFlow's in-memory ram://, which
stands for gs:// and every other `tf.io.gfile` file system. In one process datagen, training,
averaging, decoding and export read and write only there: the working folder and the system
temp folder stay empty (a ram:// path taken for a local one, `os.path.abspath("ram://d")` =
"<cwd>/ram:/d", or a local temporary file would land in one of them). The one exception is
TensorFlow's own: AutoGraph keeps the Python source of each function it converts as a
`__autograph_generated_file*.py` module in the temp folder."""
import os
import tempfile
import uuid

import tensorflow as tf

import t2t_lite
from t2t_lite import registry
from t2t_lite.decoding import decoder, trained_model
from t2t_lite.storage.run_description import saved_run
from t2t_lite.serving import export
from t2t_lite.training import averaging, trainer

from program_runs import TINY, hparams_of

SOURCES = ["3 7 1", "2 2 5 9", "8"]


def files_under(folder: str) -> list:
    return sorted(os.path.join(root, name)[len(folder):]
                  for root, _, names in tf.io.gfile.walk(folder) for name in names)


def test_datagen_train_average_decode_export_on_ram(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.chdir(tmp_path)
    system_temp = str(tmp_path_factory.mktemp("system_temp"))  # Python's and TensorFlow's
    monkeypatch.setattr(tempfile, "tempdir", system_temp)
    monkeypatch.setenv("TMPDIR", system_temp)
    root = f"ram://cycle-{uuid.uuid4().hex}"
    data_dir, tmp_dir, output_dir = f"{root}/data", f"{root}/tmp", f"{root}/train"
    averaged, export_dir = f"{root}/averaged/model.ckpt", f"{root}/export/1"
    decode_from, decode_to = f"{root}/decode/in.txt", f"{root}/decode/out.txt"

    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 200, "dev": 20, "test": 5}
    problem.generate_data(data_dir, tmp_dir)
    hparams = hparams_of(TINY)
    trainer.train("algorithmic_copy", "transformer", hparams, data_dir, output_dir,
                  trainer.RunConfig(train_steps=2, save_checkpoints_steps=1, eval_steps=0,
                                    log_every_steps=1))
    assert tf.train.latest_checkpoint(output_dir) == f"{output_dir}/model.ckpt-2"
    trained = files_under(output_dir)
    assert {"/hparams.json", "/learning_rate.png", "/checkpoint"} <= set(trained), trained
    assert any(name.startswith("/train/events.") for name in trained), trained
    assert saved_run(output_dir)["problem"] == "algorithmic_copy"

    name = os.path.basename(averaging.average_checkpoints(output_dir, 2, averaged))
    assert files_under(f"{root}/averaged") == [
        "/hparams.json", f"/model.ckpt/{name}.data-00000-of-00001", f"/model.ckpt/{name}.index",
        "/model.ckpt/checkpoint"]

    with tf.io.gfile.GFile(decode_from, "w") as handle:
        handle.write("".join(line + "\n" for line in SOURCES))
    model = t2t_lite.load(f"{root}/averaged", averaged, data_dir=data_dir)
    lines = decoder.read_sentences(decode_from)
    translations = decoder.write_translations(model.translator(
        *trained_model.decode_hparams({})), lines, decode_to, show_progress=False)
    with tf.io.gfile.GFile(decode_to) as handle:
        assert len(handle.read().splitlines()) == len(SOURCES)
    assert 0 <= decoder.score(translations, lines)["exact_match"] <= 1
    assert files_under(f"{root}/decode") == ["/in.txt", "/out.txt"]

    export.export(trained_model.open_run(output_dir, data_dir), export_dir,
                  checkpoint_path=averaged)
    assert {"/saved_model.pb", "/hparams.json"} <= set(files_under(export_dir))
    assert tf.io.gfile.listdir(f"{root}/export") == ["1"]  # no temporary folder left
    served = tf.saved_model.load(export_dir).signatures[export.SIGNATURE_NAME](
        inputs=tf.constant(SOURCES))
    assert served["outputs"].shape == [len(SOURCES)] and served["scores"].shape == [3]

    assert os.listdir(tmp_path) == []
    assert [name for name in os.listdir(system_temp)
            if not name.startswith("__autograph_generated_file")] == []
