#!/usr/bin/env python3
# check-cycles.py — no call cycle between the files of a folder: for each
# FOLDER given, an edge A -> B when A.o uses a symbol B.o defines (nm); any
# cycle is printed with the symbols that make it, and the check fails.
# Usage: OBJDIR FOLDER...  (make check-layers runs it on build/obj service)
import os, subprocess, sys

def graph(objdir, folder):
    defs, uses = {}, {}
    d = os.path.join(objdir, folder)
    for f in sorted(os.listdir(d)):
        if not f.endswith('.o'):
            continue
        n = f[:-2]
        out = subprocess.run(['nm', os.path.join(d, f)], capture_output=True, text=True, check=True).stdout
        defs[n], uses[n] = set(), set()
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in 'TDBRC':
                defs[n].add(p[2])
            elif len(p) == 2 and p[0] == 'U':
                uses[n].add(p[1])
    return {a: {b: sorted(uses[a] & defs[b]) for b in defs if b != a and uses[a] & defs[b]} for a in defs}

def cycles(edges):
    state, found = {}, []
    def visit(v, path):
        state[v] = 1
        path.append(v)
        for w in sorted(edges[v]):
            if state.get(w) == 1:
                found.append(path[path.index(w):] + [w])
            elif w not in state:
                visit(w, path)
        path.pop()
        state[v] = 2
    for v in sorted(edges):
        if v not in state:
            visit(v, [])
    return found

bad = 0
for folder in sys.argv[2:]:
    e = graph(sys.argv[1], folder)
    for c in cycles(e):
        bad = 1
        print('%s/: call cycle %s' % (folder, ' -> '.join(c + [])), file=sys.stderr)
        for a, b in zip(c, c[1:]):
            print('  %s.c -> %s.c: %s' % (a, b, ', '.join(e[a][b][:5])), file=sys.stderr)
sys.exit(bad)
