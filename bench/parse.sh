#!/usr/bin/env bash
# parse.sh — time `kiln dockerfile parse` on a generated 10,000-instruction
# Dockerfile (multi-stage, continuations, JSON and shell forms, flags,
# heredocs, ENV/LABEL pairs), median of 15 runs with hyperfine, against the
# peer in the same run: Microsoft's dockerfile-ast (the parser behind VS
# Code's Dockerfile support) under node, if npm can install it.
# Usage: bench/parse.sh [N_INSTRUCTIONS]   (run from the repository root)
set -euo pipefail
N=${1:-10000}
KILN=${KILN:-$PWD/bin/kiln}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-parse.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DF=$WORK/Dockerfile

# Ten instruction shapes, cycled; each shape counts as one instruction.
python3 - "$N" "$DF" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
shapes = [
    'FROM --platform=$BUILDPLATFORM golang:1.22-alpine AS build{i}',
    'ARG VERSION_{i}=1.{i}.0 TARGETOS TARGETARCH',
    'ENV GOFLAGS="-trimpath -mod=readonly" CGO_ENABLED=0 STEP={i}',
    'RUN --mount=type=cache,target=/go/pkg/mod \\\n    --mount=type=cache,target=/root/.cache/go-build \\\n    go build -ldflags="-s -w -X main.v=${{VERSION_{i}}}" \\\n      -o /out/app{i} ./cmd/app',
    'COPY --from=build{j} --chown=app:app --chmod=0755 /out/app{j} /usr/local/bin/app{i}',
    'LABEL org.opencontainers.image.title="app {i}" org.opencontainers.image.version="1.{i}"',
    'RUN <<EOF\nset -eux\necho step {i} >> /var/log/build.log\nEOF',
    'HEALTHCHECK --interval=30s --timeout=3s --retries=3 CMD ["wget", "-q", "http://127.0.0.1:8080/{i}"]',
    'RUN set -eux; \\\n\tapk add --no-cache ca-certificates tzdata; \\\n# a comment inside the continuation\n\taddgroup -S app{i} && adduser -S -G app{i} app{i}',
    'CMD ["/usr/local/bin/app{i}", "--listen", ":8080"]',
]
with open(path, "w") as f:
    f.write("# syntax=docker/dockerfile:1\n")
    for i in range(n):
        f.write(shapes[i % len(shapes)].format(i=i, j=max(i - 4, 0)) + "\n")
PY
echo "# $(grep -c '' "$DF") lines, $N instructions, $(du -h "$DF" | cut -f1)"
got=$("$KILN" dockerfile parse --dump "$DF" | grep -c '')
[ "$got" -eq "$N" ] || { echo "kiln parsed $got instructions, want $N" >&2; exit 1; }

cmds=("$KILN dockerfile parse --json $DF" "$KILN dockerfile parse --dump $DF")
names=("kiln --json" "kiln --dump")
if command -v npm >/dev/null && npm install --silent --no-audit --no-fund --prefix "$WORK/peer" dockerfile-ast@0.7.1 >/dev/null 2>&1; then
	cat >"$WORK/peer/parse.js" <<'JS'
const fs = require("fs");
const { DockerfileParser } = require("dockerfile-ast");
const df = DockerfileParser.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = df.getInstructions().map((i) => [i.getKeyword(), i.getArguments().map((a) => a.getValue())]);
process.stdout.write(JSON.stringify(out).length + " bytes, " + out.length + " instructions\n");
JS
	echo "# peer: $(node "$WORK/peer/parse.js" "$DF")"
	cmds+=("node $WORK/peer/parse.js $DF")
	names+=("dockerfile-ast (node)")
else
	echo "# peer dockerfile-ast unavailable (npm install failed): kiln only"
fi
args=()
for i in "${!cmds[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
hyperfine -N --warmup 2 --runs 15 --export-json "$WORK/h.json" "${args[@]}" >/dev/null
python3 - "$WORK/h.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("%-24s median %8.1f ms   (min %.1f, max %.1f, %d runs)" % (
        r["command"], r["median"] * 1000, r["min"] * 1000, r["max"] * 1000, len(r["times"])))
PY
