"""The import graph of scalerl, as import-linter sees it (grimp): its circles and its largest modules.

    python scripts/import_graph.py            # the circles (each a strongly connected set of modules), the 5 largest
    python scripts/import_graph.py --check    # exit 1 when there is a circle

Every import counts, one inside a function included (a lazy import hides a circle, it does not break it);
an import under `if TYPE_CHECKING:` too. A circle is a set of modules each reachable from the others.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def circles(graph) -> list[list[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.find_modules_directly_imported_by(step)))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    out.append(sorted(members))
    return sorted(out)


def largest(n: int = 5) -> list[tuple[int, str]]:
    """The `n` longest modules of the package, in lines."""
    sizes = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in (ROOT / "scalerl").rglob("*.py")]
    return sorted(sizes, reverse=True)[:n]


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph("scalerl", cache_dir=None)
    found = circles(graph)
    print(f"{len(graph.modules)} modules, {len(found)} circle(s)")
    for members in found:
        print("  circle: " + " <-> ".join(members))
    print("largest modules: " + ", ".join(f"{path} {lines}" for lines, path in largest()))
    return 1 if found and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
