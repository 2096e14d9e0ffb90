"""The bundled catalog's data file (memfit/data/catalog.json), read once."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources


@cache
def load_catalog_file() -> dict:
    """The catalog document: `quant_spreads` and `models` (see the file's `about`)."""
    with resources.files("memfit").joinpath("data", "catalog.json").open(encoding="utf-8") as f:
        return json.load(f)
