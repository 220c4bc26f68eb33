"""CTranslate2 4.x in a virtual environment of its own, for benchmarks/decode_speed.py --compare.

OpenNMT-tf 2.32 requires ctranslate2>=3,<4, so the peer's environment
(peers/opennmt_tf/run.py) has CTranslate2 3.24. CTranslate2 4.x, the version its users run, is
installed here into --ctranslate2_venv_dir (default ~/.cache/t2t_lite/peers/ctranslate2): the
`ctranslate2` package with its own numpy and PyYAML, and `sentencepiece` for t2t_lite's exported
models, no TensorFlow (about 250 MB). The
environment is created on first use by peer_environment.py's `ensure_environment`, as the
peers' are, with this file's requirements (a Python 3.10 or 3.11 as the OpenNMT-tf peer's, the
same marker file and exit status 3 when there is none), and reused after.

It translates a model that another environment converted. The OpenNMT-tf peer's checkpoint is
converted once by CTranslate2 3.24's `ct2-opennmt-tf-converter` in the peer's environment (what
OpenNMT-tf 2.32's pin allows; run.py's `convert_to_ctranslate2`), and CTranslate2 4.x loads that
directory: its loader accepts any model.bin whose binary version and specification revision are
at most its own (`check_version` in src/models/model.cc), and both versions write binary version
6, TransformerSpec revision 7. Checked on a checkpoint of the peer: 4.8.5's own converter (run
in an environment with TensorFlow 2.13 and OpenNMT-tf 2.32 installed with --no-deps beside it)
writes the same 95 variables byte for byte, plus one flag that 3.24 does not write and 4.x reads
as false when absent (encoder/multi_query_attention). The eole peer's CTranslate2 model (its
run.py --ctranslate2_dir, converted by 4.8.5's own eole converter) is served by this same
environment (decode_speed.py's eole rows).

Compute types on a CPU (CTranslate2's `resolve_compute_type`): "int8" on a float32 model
resolves to int8_float32 (int8 weights and int8 matrix products, the other layers in float32),
so int8 and int8_float32 are the same thing here; `Translator.compute_type` reports the
resolved type, which decode.py records.
"""
import os
import re
import sys
from importlib import metadata

PEERS = os.path.dirname(os.path.abspath(__file__))  # the peers' shared modules
if PEERS not in sys.path:
    sys.path.insert(0, PEERS)
import peer_environment  # noqa: E402

CTRANSLATE2_VERSION = "4.8.5"  # the newest on PyPI when this was written
DEFAULT_VENV_DIR = os.path.join("~", ".cache", "t2t_lite", "peers", "ctranslate2")
# The OpenNMT-tf peer's Pythons, with which this environment was first made.
SUPPORTED_PYTHONS = ("3.11", "3.10")


def requirements() -> list:
    """CTranslate2, and sentencepiece at the caller's version (t2t_lite's pin), which splits
    and joins the text of t2t_lite's exported models (their sentencepiece.model) as their users
    do."""
    return [f"ctranslate2=={CTRANSLATE2_VERSION}",
            f"sentencepiece=={metadata.version('sentencepiece')}"]


def ensure_environment(venv_dir: str = DEFAULT_VENV_DIR, requested_python: str = None) -> str:
    """The environment's Python, after creating it or completing its install if needed
    (peer_environment.ensure_environment). Exits with status 3, as the peers do, when the
    environment must be created and no Python 3.10 or 3.11 exists."""
    return peer_environment.ensure_environment(
        os.path.expanduser(venv_dir), requirements(), f"CTranslate2 {CTRANSLATE2_VERSION}",
        requested_python, SUPPORTED_PYTHONS,
        f"CTranslate2 {CTRANSLATE2_VERSION}'s environment not created: it is made with Python "
        f"3.10 or 3.11, as the OpenNMT-tf peer's")


def installed_version(venv_python: str) -> str:
    """The ctranslate2 version installed in the environment."""
    return peer_environment.installed_versions(venv_python, {"ctranslate2": "ctranslate2"})[
        "ctranslate2"]


# What CTranslate2 (3.x and 4.x) logs when it loads a model with CT2_VERBOSE=1, e.g.
#   [2026-01-01 00:00:00.000] [ctranslate2] [thread 1] [info]  - Selected ISA: AVX2
LOGGED_CPU_KEYS = {"CPU": "cpu", "Selected ISA": "isa", "Use Intel MKL": "intel_mkl",
                   "SGEMM backend": "sgemm_backend", "GEMM_S16 backend": "gemm_s16_backend",
                   "GEMM_S8 backend": "gemm_s8_backend",
                   "Selected compute type": "compute_type"}


def logged_cpu(log_text: str) -> dict:
    """The CPU, instruction set, matrix product backends and compute type that CTranslate2
    logged (the first of each; {} when it logged none)."""
    found = {}
    for line in log_text.splitlines():
        match = re.search(r"\[ctranslate2\].*\[info\]\s+(?:- )?([^:\]]+): (.*)$", line)
        if match and match.group(1) in LOGGED_CPU_KEYS:
            found.setdefault(LOGGED_CPU_KEYS[match.group(1)], match.group(2).strip())
    return found
