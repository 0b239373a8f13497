#!/usr/bin/env python3
"""The crate's module graph: which top-level module of src/ uses which (`crate::x` paths outside
comments and test modules), and its cycles.

    deploy/check/module-graph.py                   prints the edges; fails on a cycle
    deploy/check/module-graph.py --allow a,b       ... except one among exactly these modules
    deploy/check/module-graph.py --dot             the graph for Graphviz

`make lint` runs it (`--quiet`): the graph has no cycle, and none comes in.
"""
import argparse
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
TEST_MODULE = re.compile(r"^\s*(pub(\(crate\))?\s+)?mod\s+tests\b")


def production_text(path):
    """The file without comment lines, test modules and other `#[cfg(test)]` items."""
    kept = []
    lines = open(path, encoding="utf-8").read().split("\n")
    skip_next = False
    for number, line in enumerate(lines):
        stripped = line.strip()
        if skip_next:
            skip_next = False
            if TEST_MODULE.match(line):
                break  # test modules close the file, by this codebase's convention
            continue
        if stripped.startswith("#[cfg(test)]"):
            skip_next = True
            continue
        if stripped.startswith("//"):
            continue
        kept.append(line)
    return "\n".join(kept)


def modules():
    found = {}
    for directory, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            relative = os.path.relpath(os.path.join(directory, name), SRC)[:-3].split(os.sep)
            top = relative[0]
            if top in ("lib", "main", "cli"):  # the binary: it uses the library as `icepack::`
                continue
            found.setdefault(top, []).append(os.path.join(directory, name))
    return found


def edges(found):
    graph = {module: set() for module in found}
    for module, paths in found.items():
        for path in paths:
            for used in re.findall(r"crate::([a-z_][a-z0-9_]*)", production_text(path)):
                if used != module and used in found:
                    graph[module].add(used)
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--allow", default="", help="comma-separated modules one cycle may join")
    parser.add_argument("--dot", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="only the cycles and the verdict")
    args = parser.parse_args()
    graph = edges(modules())
    if args.dot:
        print("digraph icepack {\n  rankdir=TB; node [shape=box, fontsize=10];")
        for module in sorted(graph):
            for used in sorted(graph[module]):
                print(f'  "{module}" -> "{used}";')
        print("}")
        return 0
    for module in sorted(graph) if not args.quiet else []:
        print(f"{module:>16} -> {', '.join(sorted(graph[module])) or '(leaf)'}")
    allowed = sorted(filter(None, args.allow.split(",")))
    found = cycles(graph)
    bad = [component for component in found if component != allowed]
    for component in found:
        inside = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]
        verdict = "allowed for now" if component == allowed else "NOT ALLOWED"
        print(f"cycle ({verdict}): {', '.join(component)}: {'; '.join(inside)}")
    if bad:
        print("the module graph has a cycle: see docs/architecture.md", file=sys.stderr)
        return 1
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} edges, "
          f"{'no cycle' if not found else 'only the allowed cycle'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
