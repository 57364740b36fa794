"""No import cycle in the daemon or the TUI: run by ``make lint``; exits 1 naming the modules of
any cycle.

Reads the imports of ``memman_daemon`` and ``memman_tui`` with grimp (import-linter's graph) and finds the
strongly connected groups of modules (Tarjan). Imports under ``if TYPE_CHECKING:`` count too:
a module that names another's type in its annotations depends on it as much as one that calls
it, and every part gets the parts it uses as constructor arguments (``memman_daemon/app.py``),
so nothing needs to name the app to reach a sibling. In the TUI, screens get what they show
from the app and post messages for their actions (``memman_tui/app.py``), so no screen names the
app either. ``--run-time`` counts only the imports
that run.
"""

from __future__ import annotations

import sys

import grimp

PACKAGES = ("memman_daemon", "memman_tui")


def cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The groups of two or more modules of ``package`` that import each other in a loop."""
    mods = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # recursive: the package has ~100 modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.find_modules_directly_imported_by(v)):
            if w not in low and w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(mods) + 100))
    for m in mods:
        if m not in index:
            visit(m)
    return found


def main(argv: list[str]) -> int:
    type_checking = "--run-time" not in argv
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=not type_checking,
                              cache_dir=None)
    what = "imports (type-checking ones included)" if type_checking else "run-time imports"
    status = 0
    for package in PACKAGES:
        found = cycles(graph, package)
        if not found:
            print(f"no import cycle in {package} ({what})")
        for group in found:
            print(f"import cycle in {package} ({what}), {len(group)} modules: {', '.join(group)}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
