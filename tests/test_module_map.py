"""Imports go one way through the library: registry and the other top-level helpers -> data ->
layers -> models (and visualize) -> training or decoding -> serving -> bin. Training stands
beside decoding and serving: none of them imports it, and it imports neither. Read from the
source (every import statement, also those inside functions), without importing anything."""
import ast
import os

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Levels of the module map; a module imports only modules of its own level or below. Top-level
# modules not named here (errors, hparams_lib, registry, checkpoints, run_description, ...) are
# at the bottom.
LEVELS = {"data": 1, "layers": 2, "models": 3, "visualize": 3, "training": 4, "decoding": 4,
          "serving": 5, "bin": 6}
BESIDE = {("training", "decoding"), ("decoding", "training"), ("serving", "training")}


def part(module: str) -> str:
    """"t2t_lite.decoding.search" -> "decoding"; "t2t_lite.errors" -> "errors"."""
    names = module.split(".")
    return names[1] if len(names) > 1 else ""


def library_imports():
    """(file, part of the importing module, imported t2t_lite module) for every import in
    t2t_lite/ and bin/ (installed as t2t_lite.bin)."""
    for folder, package in (("t2t_lite", "t2t_lite"), ("bin", "t2t_lite.bin")):
        for root, _, files in os.walk(os.path.join(REPOSITORY, folder)):
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(root, name)
                relative = os.path.relpath(path, os.path.join(REPOSITORY, folder))
                module = ".".join([package] + relative[:-len(".py")].split(os.sep))
                with open(path, encoding="utf-8") as handle:
                    tree = ast.parse(handle.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        imported = [alias.name for alias in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                        # "from t2t_lite import checkpoints": the names may be modules.
                        imported = [f"{node.module}.{alias.name}" for alias in node.names]
                    else:
                        continue
                    for target in imported:
                        if target.startswith("t2t_lite."):
                            yield os.path.relpath(path, REPOSITORY), part(module), part(target)


def test_no_module_imports_one_above_it_or_beside_it():
    wrong = []
    for path, source, target in library_imports():
        if source == target:
            continue
        if LEVELS.get(target, 0) > LEVELS.get(source, 0) or (source, target) in BESIDE:
            wrong.append(f"{path} imports t2t_lite.{target}")
    assert not wrong, "\n".join(sorted(set(wrong)))
