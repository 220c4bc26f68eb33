"""benchmarks/peers/eole/run.py's own logic, without eole's environment: the configuration it
writes for transformer_small, the training pairs and vocabulary it gives eole, and how it reads
eole's training log."""
import importlib.util
import math
import os
import sys
import types

import pytest
import yaml

from t2t_lite import registry

RUN_PY = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "peers", "eole",
                      "run.py")


@pytest.fixture(scope="module")
def peer():
    spec = importlib.util.spec_from_file_location("eole_peer_run", os.path.abspath(RUN_PY))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hparams():
    return registry.hparams("transformer_small")


RUN = {"train_steps": 300, "save_every": 100, "average_last": 3, "num_workers": 2,
       "bucket_size": 0, "seed": 1, "log_every": 25, "train_from": None}
DATA = {"vocabulary": "/d/eole_vocab.txt", "vocabulary_size": 8193,
        "train_source": "/d/train.eole.source", "train_target": "/d/train.eole.target",
        "counts": {"kept": 29000, "dropped": 0}}


def test_the_configuration_is_transformer_small(peer, hparams):
    config = peer.train_config(hparams, DATA, "/w/model", RUN)
    model, training = config["model"], config["training"]
    assert (model["hidden_size"], model["transformer_ff"], model["heads"]) == (256, 1024, 4)
    assert model["encoder"] == {"encoder_type": "transformer", "layers": 3}
    assert model["decoder"] == {"decoder_type": "transformer", "layers": 3}
    assert model["embeddings"] == {"word_vec_size": 256,
                                   "position_encoding_type": "SinusoidalConcat"}
    assert model["norm_eps"] == 1e-6
    assert model["share_embeddings"] and model["share_decoder_embeddings"]
    assert not model["generator_bias"] and not model["add_qkvbias"] and model["add_ffnbias"]
    assert (training["adam_beta1"], training["adam_beta2"], training["adam_eps"]) == \
        (0.9, 0.997, 1e-9)
    assert (training["decay_method"], training["learning_rate"], training["warmup_steps"]) == \
        ("noam", 2.0, 8000)
    assert training["max_grad_norm"] == 0 and training["label_smoothing"] == 0.1
    assert (training["batch_type"], training["batch_size"], training["accum_count"]) == \
        ("tokens", 4096, [1])
    assert training["dropout"] == training["attention_dropout"] == [0.1]
    assert training["normalization"] == "tokens" and training["compute_dtype"] == "fp32"
    assert training["keep_checkpoint"] == 5 and "train_from" not in training
    assert training["bucket_size"] == 14500  # one pass over each of the 2 workers' halves
    assert config["vocab_size_multiple"] == 1 and config["share_vocab"]


def test_continuing_sets_train_from_and_keeps_enough_checkpoints(peer, hparams):
    run = dict(RUN, train_from="/w/model/step_300", average_last=8, bucket_size=1000)
    training = peer.train_config(hparams, DATA, "/w/model", run)["training"]
    assert training["train_from"] == "/w/model/step_300"
    assert training["keep_checkpoint"] == 8 and training["bucket_size"] == 1000


def test_the_yaml_reads_back_as_the_configuration(peer, hparams):
    config = peer.train_config(hparams.replace(learning_rate_warmup_steps=400,
                                               learning_rate_constant=0.5),
                               DATA, "/w/model", RUN)
    assert yaml.safe_load(peer.peer_training.yaml_text(config)) == config


def test_decoding_configurations(peer):
    beam = peer.predict_config("/m", "/s", "/o", 4, "wu", 0.6, 150)
    assert (beam["beam_size"], beam["length_penalty"], beam["alpha"]) == (4, "wu", 0.6)
    assert (beam["batch_size"], beam["batch_type"]) == (32, "sents")
    assert (beam["max_length"], beam["max_length_ratio"]) == (150, 0.0)
    greedy = peer.predict_config("/m", "/s", "/o", 1, "none", 0.0, 150)
    assert greedy["beam_size"] == 1 and greedy["length_penalty"] == "none"
    assert "alpha" not in greedy
    assert peer.max_decoding_length() == 150


@pytest.mark.parametrize("overrides", [
    {"layer_preprocess_sequence": "none", "layer_postprocess_sequence": "dan"},
    {"clip_grad_norm": 1.0}, {"optimizer_multistep_accumulate_steps": 2},
    {"shared_embedding_and_softmax_weights": False}])
def test_what_run_py_does_not_map_is_refused(peer, hparams, overrides):
    peer.check_representable(hparams)
    with pytest.raises(peer.PeerError):
        peer.check_representable(hparams.replace(**overrides))


def test_data_worker_shares_and_the_bucket_of_one_pass(peer):
    for pairs, workers in ((29000, 2), (29001, 2), (10, 3), (7, 0), (7, 1)):
        shares = [peer.worker_share(pairs, workers, w) for w in range(max(1, workers))]
        assert sum(shares) == pairs
        assert peer.pass_bucket_size(pairs, workers) == max(shares)
    assert peer.worker_share(10, 3, 0) == 4  # lines 0, 1, 2 and 9


def test_training_pairs_get_the_source_eos_and_long_pairs_are_left_out(peer, tmp_path):
    source, target = tmp_path / "train.source", tmp_path / "train.target"
    source.write_text("▁a ▁b\n▁c ▁d ▁e ▁f\n▁g\n", encoding="utf-8")
    target.write_text("▁x\n▁y\n▁z ▁w ▁v ▁u\n", encoding="utf-8")
    out_source, out_target = tmp_path / "s", tmp_path / "t"
    counts = peer.write_training_pairs(str(source), str(target), str(out_source),
                                       str(out_target), max_length=4)
    assert counts == {"kept": 1, "dropped": 2}  # 4 pieces + EOS > 4 on either side
    assert out_source.read_text(encoding="utf-8") == "▁a ▁b </s>\n"
    assert out_target.read_text(encoding="utf-8") == "▁x\n"


def test_the_vocabulary_file_holds_the_pieces_only(peer, tmp_path):
    pieces = types.SimpleNamespace(tokens=[None, None, "▁a", "<piece_3>", "b"])
    path = tmp_path / "vocab.txt"
    assert peer.write_vocabulary(pieces, str(path)) == 3 + 4
    assert path.read_text(encoding="utf-8") == "▁a\n<piece_3>\nb\n"
    with pytest.raises(peer.PeerError):
        peer.write_vocabulary(types.SimpleNamespace(tokens=["</s>"]), str(path))


def test_sentencepiece_is_pinned_where_eole_allows(peer):
    assert peer.sentencepiece_version("0.2.3") == "0.2.2"
    assert peer.sentencepiece_version("0.2.0") == "0.2.0"
    assert peer.sentencepiece_version("0.1.99") == "0.1.99"


def line(time, step, ppl, lr, source, target):
    return (f"[2026-01-01 10:00:{time} INFO] Step {step}/  100; acc: 10.0; ppl: {ppl:5.2f}; "
            f"xent: {math.log(ppl):2.2f}; aux: 0.000; mtp: 0.000; attn_ent: 0.000; "
            f"lr: {lr:7.2e}; sents:     500; bsz: {source:4d}/{target:4d}/100; "
            f"999/999 tok/s;     10 sec;\n")


LOG = ("[2026-01-01 10:00:00,000 INFO] Start training loop without validation...\n"
       + line("10,000", 5, 8000.0, 8.73e-07, 3000, 2800)
       + "[2026-01-01 10:00:10,100 INFO] Saving optimizer and weights to step_5, and symlink "
         "to /w/model\n"
       "[2026-01-01 10:00:11,000 INFO] Saving transforms artifacts, if any, to /w/model/step_5\n"
       "[2026-01-01 10:00:12,100 INFO] Saving config and vocab to /w/model\n"
       + line("22,000", 10, 123.45, 1.75e-06, 3100, 2900)
       + "[2026-01-01 10:00:22,100 INFO] Saving optimizer and weights to step_10, and symlink "
         "to /w/model\n"
       "[2026-01-01 10:00:22,200 INFO] Saving config and vocab to /w/model\n")


def test_the_log_windows_leave_out_checkpoint_saves(peer):
    log = peer.parse_training_log(LOG)
    first, second = log["windows"]
    assert (first["first_step"], first["step"], second["first_step"], second["step"]) == \
        (1, 5, 6, 10)
    assert first["seconds"] == pytest.approx(10.0)
    assert second["seconds"] == pytest.approx(10.0)  # 12 s less the 2 s save of step 5
    assert first["steps_per_s"] == pytest.approx(0.5)
    assert first["target"] == pytest.approx(2800 * 5 / 10.0)
    assert second["source"] == pytest.approx(3100 * 5 / 10.0)
    assert second["target_per_update"] == 2900 and second["eole_target"] == 999
    assert second["loss"] == pytest.approx(math.log(123.45))
    assert second["learning_rate"] == 1.75e-06
    assert log["saved_steps"] == [5, 10] and log["last_checkpoint"] == 10
    assert log["loop_seconds"] == pytest.approx(22.1)  # to the last save
    assert log["last_loss"] == second["loss"]


def test_a_continued_run_counts_its_first_window_from_the_checkpoint(peer):
    text = LOG.replace("Step 5/", "Step 105/").replace("Step 10/", "Step 110/")
    first, second = peer.parse_training_log(text, start_step=100)["windows"]
    assert (first["first_step"], first["step"], second["first_step"]) == (101, 105, 106)
    assert first["steps_per_s"] == pytest.approx(0.5)


def test_throughput_medians_use_the_windows_after_skip_steps(peer):
    windows = peer.parse_training_log(LOG)["windows"]
    result = peer.throughput(windows, skip_steps=5)
    assert result["throughput_windows"] == 1
    assert result["target_tokens_per_s"] == pytest.approx(2900 * 5 / 10.0)
    assert result["target_tokens_per_step"] == pytest.approx(2900)


def test_logged_learning_rates_are_compared_with_the_same_update(peer, hparams):
    # eole's noam: learning_rate * model_dim^-0.5 * min(step^-0.5, step * warmup^-1.5)
    rates = {step: 2.0 * 256 ** -0.5 * min(step ** -0.5, step * 8000 ** -1.5)
             for step in (5, 10, 4000, 8000, 20000)}
    windows = [{"step": step, "learning_rate": float(f"{rate:.2e}")}
               for step, rate in rates.items()]
    difference = peer.learning_rate_difference(windows, hparams)
    assert difference["learning_rate_max_rel_diff"] < 5e-3  # the log's 3 significant digits


def test_the_loss_floor_is_that_of_pytorchs_label_smoothing(peer):
    vocab_size, eps = 10, 0.1
    target = [eps / vocab_size] * vocab_size
    target[0] += 1 - eps
    assert peer.torch_smoothed_entropy(vocab_size, eps) == pytest.approx(
        -sum(p * math.log(p) for p in target))
    assert peer.torch_smoothed_entropy(vocab_size, 0.0) == 0.0


def test_checkpoints_are_the_step_folders_in_update_order(peer, tmp_path):
    for name in ("step_10", "step_2", "step_x", "avg"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.00.safetensors").write_bytes(b"")
    (tmp_path / "step_30").mkdir()  # no weights: not a checkpoint
    assert peer.checkpoints(str(tmp_path)) == [(2, str(tmp_path / "step_2")),
                                               (10, str(tmp_path / "step_10"))]
    assert peer.checkpoints(str(tmp_path / "missing")) == []


def test_a_program_runs_with_its_log_and_its_progress_lines_echoed(peer, tmp_path, capsys):
    log = tmp_path / "train.log"
    script = ("print('[2026-01-01 10:00:00,000 INFO] Start training loop'); "
              "print('something else')")
    seconds = peer.run_logged([sys.executable, "-c", script], str(log), "train")
    assert seconds >= 0
    assert capsys.readouterr().out == "  [train] Start training loop\n"
    assert log.read_text(encoding="utf-8") == ("[2026-01-01 10:00:00,000 INFO] Start training "
                                               "loop\nsomething else\n")
    with pytest.raises(peer.harness.ChildFailed, match="exit status 3"):
        peer.run_logged([sys.executable, "-c", "raise SystemExit(3)"], str(log), "train")
