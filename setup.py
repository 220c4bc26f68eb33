"""Packaging for t2t_lite.

The library lives in `t2t_lite/`; problems, hparams sets and the command-line programs live in the
top-level folders `problems/`, `hparams/` and `bin/` (the layout tensor2tensor users know) and are
installed under the package namespace as `t2t_lite.problems`, `t2t_lite.hparams` and
`t2t_lite.bin` through `package_dir`.
"""
import setuptools

LIBRARY_PACKAGES = setuptools.find_packages(include=["t2t_lite", "t2t_lite.*"])
TOP_LEVEL_FOLDERS = {"t2t_lite.problems": "problems", "t2t_lite.hparams": "hparams", "t2t_lite.bin": "bin"}

# Versions that were installed and tested together (TensorFlow 2.21 needs tensorflow-text 2.21.1:
# 2.21.0's wheel fails to import with an undefined ICU symbol).
INSTALL_REQUIRES = [
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "keras==3.15.1",
    "tensorflow-datasets==4.9.10",
    "sacrebleu==2.6.0",
    "sentencepiece==0.2.3",
    "absl-py==2.5.1",
    "matplotlib==3.11.2",
    "tensorboard==2.21.0",
    "importlib_resources==7.1.0",  # tensorflow-datasets imports it but declares it for Python < 3.9
    "tqdm==4.70.1",
]
# CTranslate2 for `t2t_lite-exporter --format=ctranslate2` and `t2t_lite-decoder
# --ctranslate2_model`: `pip install ".[ctranslate2]"`.
CTRANSLATE2_REQUIRE = ["ctranslate2==4.8.5"]

setuptools.setup(
    name="t2t_lite",
    version="0.1.0",
    description="The Transformer of 'Attention Is All You Need' on TensorFlow 2 and Keras 3, "
    "in the style of tensor2tensor.",
    python_requires=">=3.10",
    packages=LIBRARY_PACKAGES + list(TOP_LEVEL_FOLDERS),
    package_dir=TOP_LEVEL_FOLDERS,
    install_requires=INSTALL_REQUIRES,
    extras_require={"ctranslate2": CTRANSLATE2_REQUIRE,
                    "test": ["pytest==9.0.3", "pytest-xdist==3.8.0", "execnet==2.1.2",
                             "build==1.6.1", "wheel==0.48.0",
                             "PyYAML==6.0.3"]  # reads back the eole peer's YAML
                    + CTRANSLATE2_REQUIRE},
    entry_points={
        "console_scripts": [
            "t2t_lite-datagen=t2t_lite.bin.datagen:run",
            "t2t_lite-trainer=t2t_lite.bin.trainer:run",
            "t2t_lite-decoder=t2t_lite.bin.decoder:run",
            "t2t_lite-avg-checkpoints=t2t_lite.bin.avg_checkpoints:run",
            "t2t_lite-exporter=t2t_lite.bin.exporter:run",
        ]
    },
)
