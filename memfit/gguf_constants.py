"""gguf's constants (`Keys`, `GGMLQuantizationType`, `GGML_QUANT_SIZES`, ...) without the rest of the gguf package.

`import gguf` runs gguf/__init__.py, which imports its reader, writer, quantizers and vocabulary code, and numpy with
them: about 0.2 s, most of `memfit fit`'s start-up, for names that are all memfit uses of it (its own GGUF reader
imports numpy only when it walks a file's token arrays). This module executes gguf's own `gguf/constants.py` (it
imports nothing but `enum` and `typing`) as the module `gguf.constants`, registered in sys.modules, so a later
`import gguf` in the same process (the tools, the tests) takes in this same module: one set of enums in the process.
(`gguf.X` and `from gguf.constants import X` work after that; only the attribute `gguf.constants` is not set.)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING

NAME = "gguf.constants"


def _load() -> ModuleType:
    loaded = sys.modules.get(NAME)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("gguf")  # finds the package without running its __init__
    locations = list(package.submodule_search_locations or ()) if package is not None else []
    path = next((p for p in (os.path.join(loc, "constants.py") for loc in locations) if os.path.exists(p)), None)
    spec = importlib.util.spec_from_file_location(NAME, path) if path is not None else None
    if spec is None or spec.loader is None:
        import gguf.constants  # an unusual installation: the package's own import, numpy and all

        return gguf.constants
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[NAME]
        raise
    return module


if TYPE_CHECKING:
    from gguf.constants import (
        GGML_QUANT_SIZES,
        GGUF_DEFAULT_ALIGNMENT,
        GGUF_MAGIC,
        MODEL_TENSOR,
        TENSOR_NAMES,
        GGMLQuantizationType,
        GGUFType,
        GGUFValueType,
        Keys,
        LlamaFileType,
    )
else:
    _constants = _load()
    GGML_QUANT_SIZES = _constants.GGML_QUANT_SIZES
    GGUF_DEFAULT_ALIGNMENT = _constants.GGUF_DEFAULT_ALIGNMENT
    GGUF_MAGIC = _constants.GGUF_MAGIC
    MODEL_TENSOR = _constants.MODEL_TENSOR
    TENSOR_NAMES = _constants.TENSOR_NAMES
    GGMLQuantizationType = _constants.GGMLQuantizationType
    GGUFType = _constants.GGUFType
    GGUFValueType = _constants.GGUFValueType
    Keys = _constants.Keys
    LlamaFileType = _constants.LlamaFileType

__all__ = [
    "GGML_QUANT_SIZES",
    "GGUF_DEFAULT_ALIGNMENT",
    "GGUF_MAGIC",
    "MODEL_TENSOR",
    "TENSOR_NAMES",
    "GGMLQuantizationType",
    "GGUFType",
    "GGUFValueType",
    "Keys",
    "LlamaFileType",
]
