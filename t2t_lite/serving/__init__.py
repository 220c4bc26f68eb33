"""Serving: a trained model exported as a SavedModel or a CTranslate2 folder."""


def export_run(run, export_dir: str, format: str = "saved_model", checkpoint_path: str = None,
               quantization: str = "int8", search_hparams=None, jit_compile: bool = False,
               overwrite: bool = False) -> str:
    """Exports the TrainedRun `run` as `format` into export_dir, locked and written whole (by
    export.export or ctranslate2_export.export_ctranslate2); returns the checkpoint."""
    from t2t_lite.serving import ctranslate2_export, export
    from t2t_lite.errors import FlagError
    from t2t_lite.storage import outputs
    if format not in ("saved_model", "ctranslate2"):
        raise FlagError(f"format={format!r}: expected saved_model or ctranslate2")
    output = outputs.Output.whole_folder(export_dir, "export_dir")
    with outputs.opened(output):
        if format == "ctranslate2":
            return ctranslate2_export.export_ctranslate2(run, output.path, quantization,
                                                         checkpoint_path, overwrite)
        return export.export(run, output.path, search_hparams or export.SearchHParams(),
                             checkpoint_path, jit_compile, overwrite)
