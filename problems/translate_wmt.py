"""WMT 2014 English -> German (Bojar et al., 2014), the paper's base task (§6.1): about 4.5 million
training pairs, newstest2013 as dev and newstest2014 as test, with t2t's 32k joint vocabulary
(`translate_ende_wmt32k`).

The data comes from TensorFlow Datasets (`wmt14_translate/de-en`), which downloads and prepares
it once into `tmp_dir/tfds` (several GB from statmt.org and other hosts) and streams it from there.
"""
import os

from t2t_lite.data.problem import DEV, TEST, TRAIN
from t2t_lite.data.text_problem import Text2TextProblem
from t2t_lite.errors import DataError
from t2t_lite.registry import register_problem
from t2t_lite.storage.storage_errors import reported_full_storage

TFDS_SPLITS = {TRAIN: "train", DEV: "validation", TEST: "test"}


@register_problem
class TranslateEndeWmt14(Text2TextProblem):
    """English source, German target, a joint BPE vocabulary of about 32k pieces."""

    source_language, target_language = "en", "de"
    approx_vocab_size = 32768
    tfds_name = "wmt14_translate/de-en"

    def tfds_dir(self, tmp_dir: str) -> str:
        return os.path.join(tmp_dir, "tfds")

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str):
        # Not a generator: the download fails here, when called, rather than inside the
        # SentencePiece trainer that consumes the samples (which turns errors into RuntimeError).
        pairs = self.load(tmp_dir, split)
        return ({"inputs": pair[self.source_language].decode("utf-8"),
                 "targets": pair[self.target_language].decode("utf-8")}
                for pair in pairs.as_numpy_iterator())

    def load(self, tmp_dir: str, split: str):
        """The split as a tf.data.Dataset of {"de": bytes, "en": bytes}, downloaded and prepared
        into tmp_dir/tfds on first use."""
        import tensorflow_datasets as tfds  # imported here: slow, and only datagen needs it
        try:
            with reported_full_storage(tmp_dir, "tmp_dir"):
                return tfds.load(self.tfds_name, split=TFDS_SPLITS[split],
                                 data_dir=self.tfds_dir(tmp_dir), shuffle_files=False)
        except ModuleNotFoundError as error:  # tfds 4.9.10 imports importlib_resources undeclared
            raise DataError(f"tensorflow-datasets needs the package {error.name} to prepare "
                            f"{self.tfds_name}: pip install {error.name}") from None
        except OSError as error:  # requests' ConnectionError, file errors
            raise DataError(f"cannot download or read {self.tfds_name} into "
                            f"{self.tfds_dir(tmp_dir)}: {error}") from None
