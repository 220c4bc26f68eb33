"""Built-in problems; importing this package registers them."""
from t2t_lite.problems import (  # noqa: F401
    algorithmic, translate_files, translate_multi30k, translate_wmt)
