#!/usr/bin/env python3
# oci_tree.py LAYOUT[:TAG] — the file tree an OCI image holds, one line per path:
# the layers merged by OCI whiteout rules (.wh.NAME, .wh..wh..opq), straight
# from the layer tars (no unpacking, so nothing of the host's filesystem or
# of an unpacker's choices comes in).  Names are bytes, printed escaped; each
# line has type, mode, uid:gid, link target or content sha256, and the
# extended attributes (PAX SCHILY.xattr.*, values as hex).  A hard link is
# listed as the file it names (which of two links comes first in a layer is
# the writer's choice).  --ignore-content PATH... lists those paths without
# their content (files whose bytes hold a build time, e.g. logs).
import gzip
import hashlib
import json
import os
import sys
import tarfile

def layout_manifest(ref):
    d, _, tag = ref.partition(":")
    idx = json.load(open(os.path.join(d, "index.json")))
    ms = idx["manifests"]
    if tag:
        ms = [m for m in ms if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag] or ms
    blob = lambda dg: os.path.join(d, "blobs", *dg.split(":", 1))
    return json.load(open(blob(ms[-1]["digest"]))), blob

def esc(b):
    out = []
    for c in b:
        out.append(chr(c) if 0x21 <= c < 0x7f and c != 0x5c else "\\x%02x" % c)
    return "".join(out)

def norm(name):
    b = os.fsencode(name)
    while b.startswith(b"./"):
        b = b[2:]
    return b.strip(b"/")

def main():
    args = sys.argv[1:]
    ignore = set()
    if "--ignore-content" in args:
        i = args.index("--ignore-content")
        ignore = {a.encode() for a in args[i + 1:]}
        args = args[:i]
    manifest, blob = layout_manifest(args[0])
    tree = {}
    for layer in manifest["layers"]:
        f = open(blob(layer["digest"]), "rb")
        mt = layer["mediaType"]
        if "zstd" in mt:
            import subprocess
            f = subprocess.Popen(["zstd", "-dc"], stdin=f, stdout=subprocess.PIPE).stdout
        elif "gzip" in mt:
            f = gzip.GzipFile(fileobj=f)
        t = tarfile.open(fileobj=f, mode="r|", encoding="utf-8", errors="surrogateescape")
        opaque, seen = [], {}
        for m in t:
            p = norm(m.name)
            d, _, base = p.rpartition(b"/")
            if base == b".wh..wh..opq":
                opaque.append(d)
                continue
            if base.startswith(b".wh."):
                gone = (d + b"/" if d else b"") + base[4:]
                for k in [k for k in tree if k == gone or k.startswith(gone + b"/")]:
                    del tree[k]
                continue
            x = sorted((k[len("SCHILY.xattr."):], v.encode("utf-8", "surrogateescape").hex())
                       for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr."))
            xs = ",".join("%s=%s" % kv for kv in x) or "-"
            own = "%d:%d" % (m.uid, m.gid)
            if m.isdir():
                e = ("dir", m.mode, own, "-", xs)
            elif m.issym():
                e = ("symlink", m.mode & 0o7777, own, esc(os.fsencode(m.linkname)), xs)
            elif m.islnk():
                tgt = seen.get(norm(m.linkname)) or tree.get(norm(m.linkname))
                e = ("file", m.mode, own, tgt[3] if tgt else "missing-link-target", xs)
            elif m.isreg():
                if p in ignore:
                    s = "content-ignored"
                else:
                    h = hashlib.sha256()
                    r = t.extractfile(m)
                    for chunk in iter(lambda: r.read(1 << 20), b""):
                        h.update(chunk)
                    s = h.hexdigest()[:16]
                e = ("file", m.mode, own, s, xs)
            elif m.ischr() or m.isblk():
                e = ("chr" if m.ischr() else "blk", m.mode, own, "%d,%d" % (m.devmajor, m.devminor), xs)
            elif m.isfifo():
                e = ("fifo", m.mode, own, "-", xs)
            else:
                e = ("type-" + m.type.decode(), m.mode, own, "-", xs)
            seen[p] = e
            if p in tree and (tree[p][0] == "dir") != (e[0] == "dir"):
                for k in [k for k in tree if k.startswith(p + b"/")]:
                    del tree[k]
            tree[p] = e
        for d in opaque:
            for k in [k for k in tree if k.startswith(d + b"/") and k not in seen]:
                del tree[k]
    for p in sorted(tree):
        if not p:
            continue
        ty, mode, own, what, xs = tree[p]
        print("%s %s %o %s %s %s" % (esc(p), ty, mode & 0o7777, own, what, xs))

main()
