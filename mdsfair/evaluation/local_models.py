"""The local models and optional packages of the model-based scores
(:mod:`mdsfair.evaluation.bertscore`, :mod:`mdsfair.evaluation.nsp_coherence`):
a model is a Hugging Face folder, or a model id found in the local Hugging
Face cache (``HF_HOME`` / ``HF_HUB_CACHE``), and is never downloaded; a
missing model, package or setting is one line (:class:`ModelMetricError`).

Torch-free: ``huggingface_hub`` is imported only to look a model id up.
"""

import importlib
import json
import os


class ModelMetricError(RuntimeError):
    """A metric's model or Python package is missing, or its settings do not fit the model."""


def import_package(module: str, package: str, metric: str):
    """Import ``module`` for ``metric``; a missing package is one line naming
    what to ``pip install`` (``package``, or the missing dependency)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        missing = (error.name or module).split(".")[0]
        wanted = package if missing in (module.split(".")[0], package.replace("-", "_")) else missing
        raise ModelMetricError(
            f"{metric} needs the Python package {wanted!r}, which is not installed: pip install {wanted}"
        ) from None


def local_model_folder(name: str, flag: str) -> str:
    """The folder of the model ``name``: ``name`` itself when it is a folder,
    else the snapshot of the Hugging Face model id ``name`` in the local
    Hugging Face cache. Nothing is downloaded; a model found in neither is
    one line naming the flag, the cache searched and what to do."""
    if os.path.isdir(name):
        return name
    if os.path.exists(name):
        raise ModelMetricError(f"{flag} {name}: not a folder (expected a Hugging Face model folder)")
    hub = import_package("huggingface_hub", "huggingface_hub", flag)
    from huggingface_hub import constants, errors

    try:
        return hub.snapshot_download(name, local_files_only=True)
    except (errors.LocalEntryNotFoundError, errors.HFValidationError, ValueError):
        raise ModelMetricError(
            f"{flag} {name}: no such folder, and no model of that id in the Hugging Face cache "
            f"{constants.HF_HUB_CACHE}; mdsfair does not download models: save the model with save_pretrained "
            "into a folder and pass the folder (or fetch it into the cache with `hf download ID`)"
        ) from None


def model_layer_count(folder: str, flag: str) -> int:
    """``num_hidden_layers`` of the model's ``config.json``."""
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            return int(json.load(handle)["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ModelMetricError(
            f"{flag}: {path}: cannot read the model's num_hidden_layers ({type(error).__name__}: {error})"
        ) from None
