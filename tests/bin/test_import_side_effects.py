"""Importing the programs' shared module, or a program, changes nothing in the process: the
environment, the open file descriptors and what they are open on stay as they were, and
TensorFlow is not loaded (the old bin/common.py set variables and closed stderr while it loaded
TensorFlow on import). A program does all of that when its `run()` starts it (common.start)."""
import json
import os
import subprocess
import sys

import pytest

PROGRAM = """
import json, os, sys

def descriptors():
    \"\"\"{descriptor: (device, inode) of what it is open on}\"\"\"
    open_on = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            status = os.fstat(int(fd))
        except OSError:  # the listing's own, closed by now
            continue
        open_on[fd] = [status.st_dev, status.st_ino]
    return open_on

before = (dict(os.environ), descriptors())
import MODULE
after = (dict(os.environ), descriptors())
print(json.dumps({"environment": [k for k in set(before[0]) | set(after[0])
                                  if before[0].get(k) != after[0].get(k)],
                  "descriptors": before[1] == after[1],
                  "tensorflow": "tensorflow" in sys.modules}))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists descriptors in /proc")
@pytest.mark.parametrize("module", ["t2t_lite.bin.common", "t2t_lite.bin.trainer",
                                    "t2t_lite.bin.datagen", "t2t_lite.bin.decoder",
                                    "t2t_lite.bin.exporter", "t2t_lite.bin.avg_checkpoints",
                                    "t2t_lite.bin.memory_limits", "t2t_lite"])
def test_importing_leaves_the_environment_and_file_descriptors_untouched(module):
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", PROGRAM.replace("MODULE", module)],
                            env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"environment": [], "descriptors": True,
                                         "tensorflow": False}
    assert result.stderr == ""
