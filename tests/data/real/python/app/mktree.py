# mktree.py DIR N — a data tree of N small files in 100 directories, plus
# names that are not ASCII: UTF-8, Latin-1 and bytes that are no UTF-8 at all.
import os
import sys

root, n = sys.argv[1].encode(), int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, b"d%02d" % (i % 100))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, b"f%05d.txt" % i), "wb") as f:
        f.write(b"%d\n" % (i * i))
names = os.path.join(root, b"names")
os.makedirs(names)
for name in ("Főtanúsítvány.txt".encode(), b"caf\xe9-latin1.txt", b"\xff\xfe-not-utf8", "日本語".encode() * 10):
    with open(os.path.join(names, name), "wb") as f:
        f.write(name + b"\n")
os.symlink("Főtanúsítvány.txt".encode(), os.path.join(names, b"link-\xe9"))
