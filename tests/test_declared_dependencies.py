"""Every package the tests import is one that `pip install -e ".[test]"` installs.

A test import that no extra declares passes wherever the machine's Python happens to have the
package and fails in a user's fresh virtual environment (PyYAML did: the README's test command
ended in a ModuleNotFoundError there while CI, in the system Python, stayed green). Here the
imports are read from the source and each is looked up among the distributions that t2t_lite
and its `test` extra require, directly or through their own requirements, so a missing
declaration fails on any machine.
"""
import ast
import importlib.metadata
import pathlib
import re
import sys

from packaging.requirements import Requirement

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# The tests import these benchmark modules (benchmarks/README.md); their module-level imports
# run in the test process. The peers' own folders (eole/, opennmt_tf/) run in the peers'
# virtual environments and are not imported here.
IMPORTED_BENCHMARK_FOLDERS = ("benchmarks", "benchmarks/peers")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def required_distributions(name: str, extras: frozenset) -> set:
    """The canonical names of `name` with `extras` and every distribution it requires, through
    the requirements' own requirements, as the installed metadata declares them."""
    seen, pending = set(), [(name, extras)]
    while pending:
        name, extras = pending.pop()
        if (canonical(name), extras) in seen:
            continue
        seen.add((canonical(name), extras))
        try:
            requirements = importlib.metadata.distribution(name).requires or []
        except importlib.metadata.PackageNotFoundError:
            continue  # required on another platform or Python only
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker and not any(
                    requirement.marker.evaluate({"extra": extra}) for extra in {"", *extras}):
                continue
            pending.append((requirement.name, frozenset(requirement.extras)))
    return {name for name, _ in seen}


def local_module_names() -> set:
    """The repository's modules the tests may import: the test modules at any depth (pytest
    puts each test's folder on the path, so a test imports a sibling's fixtures) and the
    benchmark and peer modules."""
    folders = [*IMPORTED_BENCHMARK_FOLDERS, "benchmarks/peers/eole", "benchmarks/peers/opennmt_tf"]
    tests = {path.stem for path in (REPOSITORY / "tests").rglob("*.py")}
    return tests | {path.stem for folder in folders for path in (REPOSITORY / folder).glob("*.py")}


def imported_top_level_modules() -> dict:
    """{top-level module: files importing it} of every import in tests/ (at any depth) and the
    module-level imports of the benchmark modules the tests import, less the standard library,
    t2t_lite and the repository's own modules."""
    files = [(path, True) for path in (REPOSITORY / "tests").rglob("*.py")]
    files += [(path, False) for folder in IMPORTED_BENCHMARK_FOLDERS
              for path in (REPOSITORY / folder).glob("*.py")]
    ours = local_module_names() | {"t2t_lite"}
    found = {}
    for path, every_depth in files:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree) if every_depth else tree.body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ours:
                    found.setdefault(top, set()).add(str(path.relative_to(REPOSITORY)))
    return found


def test_every_test_import_is_installed_by_the_test_extra():
    declared = required_distributions("t2t_lite", frozenset({"test"}))
    providers = importlib.metadata.packages_distributions()
    undeclared = {module: sorted(files)
                  for module, files in imported_top_level_modules().items()
                  if not {canonical(name) for name in providers.get(module, [])} & declared}
    assert not undeclared, (
        f"imported by the tests but installed by no requirement of t2t_lite[test] in setup.py "
        f"(module: files): {undeclared}")


def test_the_lookup_sees_a_declared_and_an_undeclared_package():
    """The check above can fail: pytest is declared by the extra, and pytest-benchmark, a
    pytest plugin no requirement names, is not among what it pulls in."""
    declared = required_distributions("t2t_lite", frozenset({"test"}))
    assert {"pytest", "tensorflow", "keras", "numpy"} <= declared
    assert "pytest-benchmark" not in declared
    assert "pytest" not in required_distributions("t2t_lite", frozenset())
