"""The serving tests' shared export: the trained copy model in a CTranslate2 float32 folder,
exported once in a test session."""
import os
import subprocess

import pytest

from program_runs import program_command


@pytest.fixture(scope="session")
def exported_copy_model(trained_copy_model, built_once):
    """(data_dir, output_dir, folder): the trained copy model exported in float32 by
    t2t_lite-exporter --format=ctranslate2 (the folder is read, never written, by the
    tests)."""
    pytest.importorskip("ctranslate2")
    data_dir, output_dir, _ = trained_copy_model

    def export(parent):
        result = subprocess.run(program_command(
            "exporter", "--format=ctranslate2", "--quantization=float32",
            f"--data_dir={data_dir}", f"--output_dir={output_dir}",
            f"--export_dir={parent / 'ct2_float32'}"), capture_output=True, text=True,
            timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
    folder = os.path.join(built_once("copy_model_ct2_float32", export), "ct2_float32")
    return data_dir, output_dir, folder
