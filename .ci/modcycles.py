#!/usr/bin/env python3
"""Module-dependency check for a crate: no cycles between its top-level modules, nor
between the sub-modules of any one module (the data path reads downward only).

Usage: modcycles.py CRATE_SRC_DIR [--dot]

Edges come from every `crate::a::b` path in code (comments, strings and unit-test
modules are skipped), including grouped `use crate::{a::x, b::{y, z}}` trees, from
`super::` paths resolved against the file's own module, and from a module's bare paths
to its own children (`cache::handle(..)`). A module's own file (mod.rs) is a node of its
own: it may re-export its children's items (`pub use`), but if it calls into a child
that also names the module's items, that is a cycle. Exit 1 with the cycle printed if
one exists.
"""
import os
import re
import sys


def strip_comments_and_strings(src):
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", src[i:])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src_dir, path):
    rel = os.path.relpath(path, src_dir)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def parse_tree(text, i):
    """Parses a use-tree starting at text[i] ('{' or an ident); returns (paths, end)."""
    paths = []
    if text[i] == "{":
        i += 1
        while True:
            while i < len(text) and text[i] in " \t\r\n,":
                i += 1
            if i >= len(text) or text[i] == "}":
                return paths, i + 1
            sub, i = parse_tree(text, i)
            paths.extend(sub)
    m = re.match(r"(\w+|\*)", text[i:])
    if not m:
        return [[]], i + 1
    head = m.group(1)
    i += len(head)
    if text.startswith("::", i):
        sub, i = parse_tree(text, i + 2)
        return [[head] + p for p in sub], i
    return [[head]], i


def edges_of(src_dir):
    edges = {}
    all_modules = set()
    for root, _, files in os.walk(src_dir):
        for f in files:
            if f.endswith(".rs"):
                all_modules.add(tuple(module_of(src_dir, os.path.join(root, f))))
    for root, _, files in os.walk(src_dir):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            me = module_of(src_dir, path)
            text = strip_comments_and_strings(open(path, encoding="utf-8").read())
            # Unit tests (`#[cfg(test)] mod tests`, at the end of a file by convention)
            # are not the data path; `use super::*` there means the file itself.
            t = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", text)
            if t:
                text = text[:t.start()]
            if os.path.basename(path) == "tests.rs" or me[-1:] == ["tests"]:
                continue
            for m in re.finditer(r"\b(crate|super)::", text):
                paths, _ = parse_tree(text, m.end())
                for p in paths:
                    if m.group(1) == "crate":
                        target = p
                    else:
                        base = me[:-1] if not os.path.basename(path) == "mod.rs" else me[:-1]
                        rest = p
                        while rest and rest[0] == "super":
                            base, rest = base[:-1], rest[1:]
                        target = base + rest
                    edges.setdefault(tuple(me), set()).add(tuple(target))
            # Bare paths to the file's own child modules (`cache::handle(..)`) and `self::`.
            # Re-exports (`pub use child::Item`) are the module's interface, not a use.
            code = re.sub(r"(?m)^\s*pub(\([^)]*\))?\s+use\s[^;]*;", "", text)
            for child in all_modules:
                if len(child) == len(me) + 1 and list(child[:-1]) == me:
                    pat = r"(?<!::)\b(?:self::)?" + re.escape(child[-1]) + r"::"
                    if re.search(pat, code):
                        edges.setdefault(tuple(me), set()).add(child)
    return edges, all_modules


def find_cycle(graph):
    state, stack = {}, []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                c = visit(w)
                if c:
                    return c
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            c = visit(v)
            if c:
                return c
    return None


def main():
    src_dir = sys.argv[1]
    raw, all_modules = edges_of(src_dir)
    # Only edges to the crate's own modules (not `super::*` from a root file).
    known = {a[0] for a in all_modules if a}
    raw = {a: {b for b in t if b and b[0] in known} for a, t in raw.items()}
    # Level 1: the crate's top-level modules.
    top = {}
    for a, targets in raw.items():
        for b in targets:
            if a and b and a[0] != b[0]:
                top.setdefault(a[0], set()).add(b[0])
    problems = []
    c = find_cycle(top)
    if c:
        problems.append("top-level modules: " + " -> ".join(c))
    # Deeper: inside each module, between its children (the module's own file is a
    # node: "(mod)"; a name that is not a child module is an item of that file).
    all_modules_prefixes = {m[:d] for m in all_modules for d in range(1, len(m) + 1)}
    parents = {m[:d] for m in all_modules for d in range(1, len(m))}
    for parent in sorted(parents):
        d = len(parent)
        g = {}
        for a, targets in raw.items():
            if a[:d] != parent:
                continue
            an = a[d] if len(a) > d else "(mod)"
            for b in targets:
                if b[:d] != parent:
                    continue
                bn = b[d] if len(b) > d and b[:d + 1] in all_modules_prefixes else "(mod)"
                if an != bn:
                    g.setdefault(an, set()).add(bn)
        c = find_cycle(g)
        if c:
            problems.append(f"inside {'::'.join(parent)}: " + " -> ".join(c))
    if "--dot" in sys.argv:
        print("digraph modules {")
        for a in sorted(top):
            for b in sorted(top[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
    if problems:
        for p in problems:
            print("module cycle:", p)
        sys.exit(1)
    print(f"{src_dir}: no module cycles ({len(top)} top-level modules)")


if __name__ == "__main__":
    main()
