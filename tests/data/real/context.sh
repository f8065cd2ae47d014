#!/usr/bin/env bash
# context.sh DEST — the real corpus's build contexts in DEST/{c,python,node}:
# the committed files plus what git should not hold: names that are no UTF-8
# (python/app/names) and npm's release tarball (node/npm-10.9.2.tgz, fetched
# once with `npm pack` into ~/.cache/kiln/npm, or $KILN_NPM_TGZ).  Prints the
# cases it could make ("c python node", or without node when there is no
# tarball and no npm to fetch it).  Used by t0590 and bench/real.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=$1
mkdir -p "$dest"
cp -r "$here/c" "$here/python" "$here/node" "$dest/"
python3 - "$dest/python/app/names" <<'PY'
import os, sys
d = os.fsencode(sys.argv[1])
os.makedirs(d, exist_ok=True)
for n in ("Főtanúsítvány.pem".encode(), b"caf\xe9-latin1", b"\xc3\x28-invalid-utf8", "ü".encode() * 120):
    open(os.path.join(d, n), "wb").write(n + b"\n")
os.symlink("Főtanúsítvány.pem".encode(), os.path.join(d, b"link-to-\xe9"))
os.mkdir(os.path.join(d, "dir-ł".encode()))
open(os.path.join(d, "dir-ł".encode(), b"\xe9t\xe9"), "wb").write(b"x\n")
PY
tgz=${KILN_NPM_TGZ:-$HOME/.cache/kiln/npm/npm-10.9.2.tgz}
if [ ! -f "$tgz" ] && command -v npm >/dev/null; then
	mkdir -p "$(dirname "$tgz")"
	(cd "$(dirname "$tgz")" && npm pack npm@10.9.2 >/dev/null 2>&1) || true
fi
if [ -f "$tgz" ]; then
	cp "$tgz" "$dest/node/npm-10.9.2.tgz"
	echo "c python node"
else
	rm -rf "$dest/node"
	echo "c python"
fi
