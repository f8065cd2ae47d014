#!/usr/bin/env python3
"""mkcorpus.py DIR — write the seed layer tars for fuzz_layer (normal entries,
whiteouts, opaque dirs, hardlinks, symlink escapes, sparse, xattrs, gzip)."""
import gzip, io, os, sys, tarfile

def tar(entries, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for e in entries:
            name, kind = e[0], e[1]
            ti = tarfile.TarInfo(name)
            ti.mtime = 1000
            data = None
            if kind == "f":
                data = e[2] if len(e) > 2 else b"data"
                ti.size = len(data)
            elif kind == "d":
                ti.type = tarfile.DIRTYPE; ti.mode = 0o755
            elif kind == "l":
                ti.type = tarfile.SYMTYPE; ti.linkname = e[2]
            elif kind == "h":
                ti.type = tarfile.LNKTYPE; ti.linkname = e[2]
            elif kind == "c":
                ti.type = tarfile.CHRTYPE; ti.devmajor, ti.devminor = 1, 3
            if len(e) > 3:
                ti.pax_headers = e[3]
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
seeds = {
    "plain.tar": tar([("etc", "d"), ("etc/passwd", "f", b"root:x:0:0\n"), ("bin/sh", "f"), ("lib", "l", "usr/lib")]),
    "whiteouts.tar": tar([("etc/.wh.passwd", "f", b""), ("d/.wh..wh..opq", "f", b""), ("d/new", "f"), (".wh.lib", "f", b"")]),
    "hardlinks.tar": tar([("a", "f"), ("b", "h", "a"), ("dir/c", "h", "./b"), ("a", "f", b"new")]),
    "escape.tar": tar([("esc", "l", "../../../../tmp"), ("esc/pwn", "f"), ("/abs/x", "f"), ("x/../../y", "f")]),
    "loop.tar": tar([("a", "l", "b"), ("b", "l", "a"), ("a/x", "f")]),
    "replace.tar": tar([("p", "f"), ("p", "d"), ("p/c", "f"), ("p", "f"), ("dev", "c")]),
    "xattrs.tar": tar([("cap", "f", b"x", {"SCHILY.xattr.security.capability": "\x01\x00\x00\x02", "SCHILY.xattr.user.k": "v"})]),
    "longname.tar": tar([("a/" * 60 + "f" * 200, "f"), ("L" * 300, "f")], tarfile.GNU_FORMAT),
}
seeds["gzip.tar.gz"] = gzip.compress(seeds["plain.tar"], mtime=0)
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
