"""Fixtures of the tests of a problem's data checks."""
import pytest

from t2t_lite import registry


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """(problem, data_dir) of a small algorithmic_copy generation (300 train, 30 dev, 5 test),
    verified by its manifests; tests damage copies of it, never the folder itself."""
    problem = registry.problem("algorithmic_copy")
    problem.num_samples = {"train": 300, "dev": 30, "test": 5}
    data_dir = str(tmp_path_factory.mktemp("generated"))
    problem.generate_data(data_dir, data_dir)
    return problem, data_dir
