"""Imports go one way through the library: registry and the other top-level helpers -> data ->
layers -> models (and visualize) -> training or decoding -> serving -> bin. Training stands
beside decoding and serving: none of them imports it, and it imports neither. The layers import
no other part: the model passes them what hparams and the vocabulary decide. No modules import
each other in a loop. Read from the source (every import statement, also those inside
functions), without importing anything."""
import ast
import os

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Levels of the module map; a module imports only modules of its own level or below. Top-level
# modules not named here (errors, hparams_lib, registry, checkpoints, run_description, ...) are
# at the bottom.
LEVELS = {"data": 1, "layers": 2, "models": 3, "visualize": 3, "training": 4, "decoding": 4,
          "serving": 5, "bin": 6}
BESIDE = {("training", "decoding"), ("decoding", "training"), ("serving", "training")}
# The parts the layers import: their own only (the model passes them what they need).
LAYERS_IMPORT = {"layers"}


def part(module: str) -> str:
    """"t2t_lite.decoding.search" -> "decoding"; "t2t_lite.errors" -> "errors"; the package
    itself, the front door of the Python API (t2t_lite.train), stands where bin does."""
    if module == "t2t_lite":
        return "bin"
    names = module.split(".")
    return names[1] if len(names) > 1 else ""


def library_modules():
    """{module: path} of every module in t2t_lite/ and bin/ (installed as t2t_lite.bin); a
    package is its __init__.py."""
    modules = {}
    for folder, package in (("t2t_lite", "t2t_lite"), ("bin", "t2t_lite.bin")):
        for root, _, files in os.walk(os.path.join(REPOSITORY, folder)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(root, name)
                    relative = os.path.relpath(path, os.path.join(REPOSITORY, folder))
                    names = relative[:-len(".py")].split(os.sep)
                    if names[-1] == "__init__":
                        names.pop()
                    modules[".".join([package] + names)] = path
    return modules


def imports():
    """(file, importing module, imported t2t_lite name) for every import in t2t_lite/ and bin/;
    the name may be a module's attribute ("t2t_lite.errors.UserError")."""
    for module, path in library_modules().items():
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
                    yield os.path.relpath(path, REPOSITORY), module, target


def library_imports():
    """(file, part of the importing module, part of the imported one) for every import."""
    for path, module, target in imports():
        yield path, part(module), part(target)


def import_graph():
    """{module: the modules it imports}, an imported attribute counted as its module's."""
    modules = library_modules()
    graph = {module: set() for module in modules}
    for _, module, target in imports():
        while target not in modules:
            target = target.rpartition(".")[0]
        if target != module:
            graph[module].add(target)
    return graph


def a_loop(graph):
    """Modules [a, b, ..., a] that import each other in a ring, or None if there is none."""
    done, path = set(), []

    def visit(module):
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            loop = visit(imported)
            if loop:
                return loop
        path.pop()
        done.add(module)
        return None

    return next(filter(None, map(visit, sorted(graph))), None)


def test_no_module_imports_one_above_it_or_beside_it():
    wrong = []
    for path, source, target in library_imports():
        if source == target:
            continue
        if LEVELS.get(target, 0) > LEVELS.get(source, 0) or (source, target) in BESIDE:
            wrong.append(f"{path} imports t2t_lite.{target}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_the_layers_import_no_other_part_of_the_library():
    wrong = [f"{path} imports {target}" for path, module, target in imports()
             if part(module) == "layers" and part(target) not in LAYERS_IMPORT]
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_no_modules_import_each_other_in_a_loop():
    loop = a_loop(import_graph())
    assert loop is None, " -> ".join(loop)


def test_a_loop_is_found():
    assert a_loop({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert a_loop({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


# What only storage/ itself uses: a program opens its outputs through storage.outputs.
OPENING_AN_OUTPUT = {"t2t_lite.storage.output_lock", "prepare_output_folder",
                     "prepare_parent_folder", "prepare_output_file", "removed_on_failure"}


def test_outputs_are_opened_only_through_storage_outputs():
    """No module outside storage/ takes a lock or prepares an output path itself (the names
    of OPENING_AN_OUTPUT, imported or used as an attribute)."""
    wrong = [f"{path} imports {target}" for path, module, target in imports()
             if part(module) != "storage" and (
                 target in OPENING_AN_OUTPUT or target.rpartition(".")[2] in OPENING_AN_OUTPUT
                 or target.startswith("t2t_lite.storage.output_lock."))]
    for module, path in library_modules().items():
        if part(module) == "storage":
            continue
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
        wrong += [f"{os.path.relpath(path, REPOSITORY)}:{node.lineno} uses {node.attr}"
                  for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr in OPENING_AN_OUTPUT]
    assert not wrong, "\n".join(sorted(set(wrong)))
