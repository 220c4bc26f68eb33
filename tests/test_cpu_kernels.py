"""The programs ask for oneDNN before TensorFlow loads, and TF_ENABLE_ONEDNN_OPTS=0 keeps
TensorFlow's own kernels."""
import os
import platform
import subprocess
import sys

import pytest

PROGRAM_START = ("from t2t_lite.bin import common\n"
                 "from tensorflow.python.util import _pywrap_util_port\n"
                 "print(_pywrap_util_port.IsMklEnabled())\n")


def onednn_on(environment_value):
    environment = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    if environment_value is not None:
        environment["TF_ENABLE_ONEDNN_OPTS"] = environment_value
    output = subprocess.run([sys.executable, "-c", PROGRAM_START], env=environment,
                            capture_output=True, text=True, check=True).stdout
    return output.strip().splitlines()[-1] == "True"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="oneDNN is asked for on x86-64 only")
def test_programs_run_on_onednn_unless_the_user_says_no():
    assert onednn_on(None)
    assert not onednn_on("0")
