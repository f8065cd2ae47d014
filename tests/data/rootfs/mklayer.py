#!/usr/bin/env python3
"""mklayer.py OUT.tar SPEC... — write a layer tar from entry specs, for test
layers no tool makes on purpose (whiteouts, hostile paths, bombs):
  f:PATH[=TEXT]  regular file      d:PATH        directory
  l:PATH=TARGET  symlink           h:PATH=TARGET hardlink
  x:PATH=K=V     file with xattr   big:PATH=SIZE header declaring SIZE bytes, no data
  many:N         N small files"""
import io, sys, tarfile

def main():
    out, specs = sys.argv[1], sys.argv[2:]
    with open(out, "wb") as raw:
        t = tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT)
        for s in specs:
            kind, _, rest = s.partition(":")
            path, _, arg = rest.partition("=")
            if kind == "many":
                for i in range(int(path)):
                    ti = tarfile.TarInfo("m/%d" % i)
                    t.addfile(ti, io.BytesIO(b""))
                continue
            ti = tarfile.TarInfo(path)
            ti.mtime = 1700000000
            ti.mode = 0o644
            data = None
            if kind in ("f", "x"):
                data = (arg if kind == "f" else "xattr").encode()
                ti.size = len(data)
                if kind == "x":
                    k, _, v = arg.partition("=")
                    ti.pax_headers = {"SCHILY.xattr." + k: v}
            elif kind == "d":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            elif kind == "l":
                ti.type, ti.linkname = tarfile.SYMTYPE, arg
            elif kind == "h":
                ti.type, ti.linkname = tarfile.LNKTYPE, arg
            elif kind == "big":
                ti.size = int(arg)
                t.fileobj.write(ti.tobuf(t.format, t.encoding, t.errors))
                continue  # the declared data never follows
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
        if not any(s.startswith("big:") for s in specs):
            t.close()
        else:
            raw.write(b"\0" * 1024)

main()
