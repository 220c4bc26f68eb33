"""Averages eole checkpoints (`step_N` folders of model.00.safetensors, config.json and
vocab.json) into a new model folder, in eole's own environment:

  python average.py OUTPUT_DIR STEP_DIR [STEP_DIR ...]

eole's repository has this tool (`eole model average`, eole/bin/model/average_models.py), but
the eole 0.6.4 wheel leaves the eole/bin/model package out, so run.py brings this one. It does
what that tool does: a running mean of every tensor of model.00.safetensors over the given
folders in the given order (avg = (avg * i + w) / (i + 1)), and the config and vocabulary of a
checkpoint beside it. The optimizer state is not needed to translate and is left out.
"""
import json
import os
import shutil
import sys

from safetensors.torch import load_file, save_file

WEIGHTS = "model.00.safetensors"


def main():
    output, paths = sys.argv[1], sys.argv[2:]
    average = None
    for i, path in enumerate(paths):
        weights = load_file(os.path.join(path, WEIGHTS))
        if average is None:
            average = {name: tensor.float() for name, tensor in weights.items()}
            continue
        if set(weights) != set(average):
            raise SystemExit(f"{path} has other tensors than {paths[0]}")
        for name, tensor in average.items():
            tensor.mul_(i).add_(weights[name].float()).div_(i + 1)
    shutil.rmtree(output, ignore_errors=True)
    os.makedirs(output)
    save_file(average, os.path.join(output, WEIGHTS))
    for name in ("config.json", "vocab.json"):
        shutil.copyfile(os.path.join(paths[-1], name), os.path.join(output, name))
    print("AVERAGED " + json.dumps({"output": output, "checkpoints": paths}), flush=True)


if __name__ == "__main__":
    main()
