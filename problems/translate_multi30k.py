"""Multi30k task 1 (Elliott et al., 2016): 29,000 training, 1,014 dev and 1,000 test
(test_2016_flickr) image descriptions in German, English and French.

The raw files are downloaded from the public Multi30k dataset repository into tmp_dir, or
taken from there when already present.
"""

from t2t_lite.data.problem import DEV, TEST, TRAIN
from t2t_lite.data.text_files import maybe_download, read_parallel
from t2t_lite.data.text_problem import Text2TextProblem
from t2t_lite.registry import register_problem

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_SPLITS = {TRAIN: "train", DEV: "val", TEST: "test_2016_flickr"}


class TranslateMulti30k(Text2TextProblem):
    """Multi30k from source_language to target_language with an 8k joint vocabulary."""

    approx_vocab_size = 8192

    def raw_path(self, tmp_dir: str, split: str, language: str) -> str:
        filename = f"{MULTI30K_SPLITS[split]}.{language}.gz"
        return maybe_download(tmp_dir, filename, MULTI30K_URL + filename)

    def generate_samples(self, data_dir: str, tmp_dir: str, split: str):
        return read_parallel(self.raw_path(tmp_dir, split, self.source_language),
                             self.raw_path(tmp_dir, split, self.target_language))


@register_problem
class TranslateMulti30kDeen(TranslateMulti30k):
    source_language, target_language = "de", "en"


@register_problem
class TranslateMulti30kEnde(TranslateMulti30k):
    source_language, target_language = "en", "de"


@register_problem
class TranslateMulti30kEnfr(TranslateMulti30k):
    source_language, target_language = "en", "fr"
