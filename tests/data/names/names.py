#!/usr/bin/env python3
"""names.py — file names that must survive as bytes (t0530): UTF-8 composed
and decomposed, Latin-1, invalid UTF-8, a 250-byte name, a path over 100
bytes, symlinks whose names and targets are such names, a hardlink.
  names.py mk DIR              create the set under DIR
  names.py script DIR          print a busybox sh script that creates it
  names.py tar OUT pax|gnu     write the set as a tar (Python's tarfile)
  names.py list DIR [--nlink]  print a listing, names in hex, sorted"""
import hashlib, os, stat, sys, tarfile

NAMES = [
    b"F\xc5\x91tan\xc3\xbas\xc3\xadtv\xc3\xa1ny.pem",
    b"NetLock_Arany_=Class_Gold=_F\xc5\x91tan\xc3\xbas\xc3\xadtv\xc3\xa1ny.pem",
    b"nfd-e\xcc\x81",
    b"latin1-caf\xe9",
    b"bad-\xff\xfe-\xc3",
    b"emoji-\xf0\x9f\x94\xa5",
    b"n" * 245 + b"\xc3\xa9\xff.x",
]
DEEP = b"d-\xc3\xa9/" + NAMES[0] + b"/" + NAMES[6]  # a path of 275 bytes

def entries():
    """(kind, path, extra): 'd' dirs, 'f' files (content), 'l' symlinks (target), 'h' hardlinks (target)."""
    out = [("d", b"d-\xc3\xa9", None), ("d", b"d-\xc3\xa9/" + NAMES[0], None), ("f", DEEP, b"deep\n")]
    for i, n in enumerate(NAMES):
        out.append(("f", n, b"content of %d\n" % i))
        out.append(("l", b"l%d-\xe9" % i, n))
    out.append(("l", b"988a38cb.0", NAMES[1]))  # as ca-certificates' hash links
    out.append(("l", NAMES[3] + b".lnk", NAMES[4]))
    out.append(("h", b"h-\xe9-" + NAMES[4], NAMES[3]))
    return out

def mk(root):
    root = os.fsencode(root)
    for kind, p, x in entries():
        full = os.path.join(root, p)
        if kind == "d":
            os.makedirs(full, exist_ok=True)
        elif kind == "f":
            with open(full, "wb") as f:
                f.write(x)
        elif kind == "l":
            os.symlink(x, full)
        else:
            os.link(os.path.join(root, x), full)

def octal(b):
    return "".join("\\%03o" % c for c in b)

def script(root):
    lines = ["set -e", "cd %s" % root]
    for kind, p, x in entries():
        q = "\"$(printf '%s')\"" % octal(p)
        if kind == "d":
            lines.append("mkdir -p %s" % q)
        elif kind == "f":
            lines.append("printf '%s' > %s" % (octal(x), q))
        elif kind == "l":
            lines.append("ln -s \"$(printf '%s')\" %s" % (octal(x), q))
        else:
            lines.append("ln \"$(printf '%s')\" %s" % (octal(x), q))
    print("\n".join(lines))

def tar(out, fmt):
    f = tarfile.PAX_FORMAT if fmt == "pax" else tarfile.GNU_FORMAT
    with tarfile.open(out, "w", format=f, encoding="utf-8", errors="surrogateescape") as t:
        for kind, p, x in entries():
            ti = tarfile.TarInfo(os.fsdecode(p))
            ti.mtime = 1700000000
            if kind == "d":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                t.addfile(ti)
            elif kind == "f":
                import io
                ti.size, ti.mode = len(x), 0o644
                t.addfile(ti, io.BytesIO(x))
            elif kind == "l":
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, os.fsdecode(x), 0o777
                t.addfile(ti)
            else:
                ti.type, ti.linkname, ti.mode = tarfile.LNKTYPE, os.fsdecode(x), 0o644
                t.addfile(ti)

def listing(root, nlink):
    root = os.fsencode(root)
    out = []
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            line = [rel.hex()]
            if stat.S_ISDIR(st.st_mode):
                line.append("d")
            elif stat.S_ISLNK(st.st_mode):
                line += ["l", os.readlink(full).hex()]
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    line += ["f", hashlib.sha256(f.read()).hexdigest()[:12]]
                if nlink:
                    line.append("n%d" % st.st_nlink)
            else:
                line.append("%o" % stat.S_IFMT(st.st_mode))
            out.append(" ".join(line))
    print("\n".join(sorted(out)))

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "mk":
        mk(sys.argv[2])
    elif cmd == "script":
        script(sys.argv[2])
    elif cmd == "tar":
        tar(sys.argv[2], sys.argv[3])
    elif cmd == "list":
        listing(sys.argv[2], "--nlink" in sys.argv)
    else:
        sys.exit(__doc__)
