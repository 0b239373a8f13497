#!/usr/bin/env python3
"""The crate's module graph: which module of src/ uses which (`crate::` and `super::` paths outside
comments and test modules), and its cycles. A module of a layer's folder is a node of its own
(`table::policy`), as is every other top-level module (`config`) and each engine (`engine::spark`).

    deploy/check/module-graph.py                   prints the edges; fails on a cycle
    deploy/check/module-graph.py --allow a,b       ... except one among exactly these modules
                                                   (by default the actors, ACTORS below)
    deploy/check/module-graph.py --dot             the graph for Graphviz
    deploy/check/module-graph.py --layers          the modules by layer (docs/architecture.md)
    deploy/check/module-graph.py --upward          the imports that point up the layers

`make lint` runs it (`--quiet`): the graph has no cycle but the actors', and none comes in; and
no import points up the layers (LAYER_ORDER) but the ones UPWARD still lists, each of which must
still exist: the list only shrinks, as the layering of issue 47 proceeds.
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


# The folders whose files are modules of their own in the graph (`intake::routing`); elsewhere a
# top-level module is one node with its submodules (`config`, `store`, `simulate`), and so are the
# engines inside `engine/` (`engine::spark`, `engine::native`).
LAYERS = ("base", "model", "intake", "table", "runs", "engine", "ops")
DECLARATION = re.compile(r"^\s*(#\[cfg[^\n]*\]|(pub )?mod [a-z_0-9]+;)?\s*$")


def declarations_only(text):
    """Whether a module's production text only declares submodules (line by line: a pattern over
    the whole text backtracked exponentially on a long mod.rs that does more)."""
    return all(DECLARATION.match(line) for line in text.split("\n"))
# The actors address each other — messages go both ways, as between any two actors that talk —
# so their shells and the messages they exchange form the one cycle the graph may have. Nothing
# else may join it, and none of them reaches into a module above it.
ACTORS = "messages,runs::executor,table::actor,table::handle,table::waker,table::workers"
# The layers, lowest first: a module may import only modules of its own layer or of one below.
# Above them all, the wiring: what builds the pipeline and what the actors say to each other
# (`messages`, until its messages move down to the layers that own the conversations), the
# simulator and the test doubles.
LAYER_ORDER = ("base", "model", "config", "store", "intake", "table", "runs", "engine", "ops")
WIRING = ("messages", "service", "simulate", "testing")
# The upward imports main still has (issue 47): each one must still be there (a fixed one leaves
# this list in the same change), and no other may come in.
UPWARD = {
    ("intake::poller", "messages"), ("intake::poller", "ops::metrics"),
    ("intake::router", "messages"), ("intake::router", "ops::metrics"),
    ("intake::router", "table::handle"),
    ("ops::control", "service"), ("ops::http", "messages"), ("ops::http", "service"),
    ("runs::executor", "engine"), ("runs::executor", "messages"),
    ("runs::executor", "ops::metrics"), ("runs::executor", "ops::notifier"),
    ("runs::executor", "ops::notify"),
    ("table::actor", "messages"), ("table::actor", "ops::status"),
    ("table::actor", "runs::executor"),
    ("table::handle", "messages"), ("table::handle", "ops::metrics"),
    ("table::handle", "runs::executor"),
    ("table::supervisor", "messages"), ("table::supervisor", "ops::metrics"),
    ("table::supervisor", "runs::executor"),
    ("table::waker", "messages"),
}
PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)*)")


def module_path(path):
    parts = os.path.relpath(path, SRC)[:-3].split(os.sep)
    return parts[:-1] if parts[-1] == "mod" else parts


def node_of(parts):
    return "::".join(parts[:2] if parts[0] in LAYERS else parts[:1])


def modules():
    """Each node of the graph, with the files it is made of."""
    found = {}
    for directory, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(directory, name)
            parts = module_path(path)
            if parts[0] in ("lib", "main", "cli"):  # the binary: it uses the library as `icepack::`
                continue
            if len(parts) == 1 and declarations_only(production_text(path)):
                continue  # a layer's mod.rs that only declares its modules
            found.setdefault(node_of(parts), []).append(path)
    return found


def edges(found):
    graph = {module: set() for module in found}
    for module, paths in found.items():
        for path in paths:
            here = module_path(path)
            for root, rest in PATH.findall(production_text(path)):
                segments = rest.split("::")[1:]
                if root == "super":
                    base = here[:-1]
                    while segments and segments[0] == "super":
                        base, segments = base[:-1], segments[1:]
                    segments = base + segments
                if not segments:
                    continue
                used = node_of(segments)
                if used not in found and len(segments) > 1:
                    used = segments[0]
                if used != module and used in found:
                    graph[module].add(used)
    return graph


def layer_of(module):
    """The module's rank in LAYER_ORDER (the wiring above every layer)."""
    top = module.split("::")[0]
    return LAYER_ORDER.index(top) if top in LAYER_ORDER else len(LAYER_ORDER)


def upward(graph):
    """The imports of a module from a module of a higher layer (a layer's modules may use one
    another; the wiring may use anything)."""
    return sorted((module, used) for module, uses in graph.items() for used in uses
                  if layer_of(used) > layer_of(module)
                  and not (module.split("::")[0] in WIRING and used.split("::")[0] in WIRING))


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


def layers(graph, allowed):
    """Modules by layer: the length of the longest path down to a leaf, the allowed cycle's
    modules merged into one (they share their layer)."""
    def merged(module):
        return "(actors)" if module in allowed else module

    condensed = {}
    for module, used in graph.items():
        condensed.setdefault(merged(module), set()).update(
            merged(u) for u in used if merged(u) != merged(module))
    depth = {}

    def visit(node):
        if node not in depth:
            depth[node] = 1 + max((visit(n) for n in condensed[node]), default=-1)
        return depth[node]

    found = {}
    for module in sorted(graph):
        found.setdefault(visit(merged(module)), []).append(module)
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--allow", default=ACTORS, help="comma-separated modules one cycle may join "
                        "(default: the actors')")
    parser.add_argument("--dot", action="store_true")
    parser.add_argument("--layers", action="store_true",
                        help="each module's layer: its longest path down to a leaf, the allowed "
                        "cycle counted as one module")
    parser.add_argument("--quiet", action="store_true", help="only the cycles and the verdict")
    parser.add_argument("--upward", action="store_true", help="the imports that point up the layers")
    args = parser.parse_args()
    graph = edges(modules())
    allowed = sorted(filter(None, args.allow.split(",")))
    if args.dot:
        print("digraph icepack {\n  rankdir=TB; node [shape=box, fontsize=10];")
        for module in sorted(graph):
            for used in sorted(graph[module]):
                print(f'  "{module}" -> "{used}";')
        print("}")
        return 0
    if args.layers:
        for layer, members in sorted(layers(graph, set(allowed)).items(), reverse=True):
            print(f"{layer:>2}  {' '.join(members)}")
        return 0
    up = upward(graph)
    if args.upward:
        for module, used in up:
            print(f"{module} -> {used}{'' if (module, used) in UPWARD else '   (new)'}")
        return 0
    for module in sorted(graph) if not args.quiet else []:
        print(f"{module:>22} -> {', '.join(sorted(graph[module])) or '(leaf)'}")
    found = cycles(graph)
    bad = [component for component in found if component != allowed]
    for component in bad if args.quiet else found:
        inside = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in component]
        verdict = "allowed" if component == allowed else "NOT ALLOWED"
        print(f"cycle ({verdict}): {', '.join(component)}: {'; '.join(inside)}")
    new = [edge for edge in up if edge not in UPWARD]
    gone = sorted(UPWARD - set(up))
    for module, used in new:
        print(f"upward import (NOT ALLOWED): {module} -> {used}: {module.split('::')[0]} is below "
              f"{used.split('::')[0]} (LAYER_ORDER)")
    for module, used in gone:
        print(f"fixed upward import still listed: {module} -> {used}: remove it from UPWARD")
    if bad:
        print("the module graph has a cycle: see docs/architecture.md", file=sys.stderr)
        return 1
    if new or gone:
        print("the module graph's layers: see docs/architecture.md", file=sys.stderr)
        return 1
    print(f"{len(graph)} modules, {sum(map(len, graph.values()))} edges, "
          f"{'no cycle' if not found else 'only the allowed cycle'}, "
          f"{len(up)} upward imports left (issue 47)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
