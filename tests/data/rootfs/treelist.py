#!/usr/bin/env python3
"""treelist.py — print a canonical listing of a directory tree (one line per
path: type, mode, owner, size, link count, content hash, link target, xattrs,
mtime) so two trees — a mounted kiln ext4 and `umoci unpack` — can be diffed.
Usage: treelist.py ROOT [--no-mtime-dirs] [--skip NAME ...]"""
import hashlib, os, stat, sys

def main():
    root = sys.argv[1]
    args = sys.argv[2:]
    no_dir_mtime = "--no-mtime-dirs" in args
    skip = set(args[args.index("--skip") + 1:]) if "--skip" in args else set()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in [None] + sorted(filenames + dirnames):
            path = dirpath if name is None else os.path.join(dirpath, name)
            if name is not None and os.path.isdir(path) and not os.path.islink(path):
                continue  # listed when walked
            if name is None and rel_dir != "." and False:
                continue
            rel = os.path.relpath(path, root)
            if name is not None and rel_dir == "." and name in skip:
                continue
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            line = [rel, "%o" % kind, "%04o" % stat.S_IMODE(st.st_mode), str(st.st_uid), str(st.st_gid)]
            if stat.S_ISREG(kind):
                h = hashlib.sha256()
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
                line += [str(st.st_size), "n%d" % st.st_nlink, h.hexdigest()[:16]]
            elif stat.S_ISLNK(kind):
                line += ["->" + os.readlink(path)]
            elif stat.S_ISCHR(kind) or stat.S_ISBLK(kind):
                line += ["%d,%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))]
            try:
                names = sorted(os.listxattr(path, follow_symlinks=False))
            except OSError:
                names = []
            for x in names:
                line.append("x:%s=%s" % (x, os.getxattr(path, x, follow_symlinks=False).hex()))
            if not (stat.S_ISDIR(kind) and no_dir_mtime) and not stat.S_ISLNK(kind) and rel != ".":
                line.append("t%d" % int(st.st_mtime))
            out.append(" ".join(line))
    sys.stdout.write("\n".join(out) + "\n")

main()
