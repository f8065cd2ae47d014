#!/usr/bin/env bash
# plan.sh — time `kiln dockerfile plan` (syntax + semantic pass: expansion,
# ARG/ENV scoping, stage graph, JSON) on a generated ARG-heavy 10,000-
# instruction multi-stage Dockerfile, median of 15 runs with hyperfine,
# against `kiln dockerfile parse --json` on the same file in the same run
# (no BuildKit daemon runs on this machine, so the syntax pass alone is the
# peer: the difference is what the semantic pass costs).
# Usage: bench/plan.sh [N_INSTRUCTIONS]   (run from the repository root)
set -euo pipefail
N=${1:-10000}
KILN=${KILN:-$PWD/bin/kiln}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kiln-bench-plan.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DF=$WORK/Dockerfile

# Ten instruction shapes per stage, cycled; every stage copies from the one
# before it, so the whole file is one dependency chain and all of it is built.
python3 - "$N" "$DF" <<'PY'
import sys
n, path = int(sys.argv[1]), sys.argv[2]
shapes = [
    'FROM --platform=$BUILDPLATFORM ${{REGISTRY}}/golang:${{GO_VERSION}}-alpine AS build{s}',
    'ARG VERSION=1.{s}.0 TARGETOS TARGETARCH GO_VERSION UID',
    'ENV GOFLAGS="-trimpath -mod=readonly" CGO_ENABLED=0 STEP={s} APP_HOME=/opt/app{s}',
    'WORKDIR ${{APP_HOME}}/src',
    'RUN --mount=type=cache,target=/root/.cache/go-build,id=go-$TARGETARCH \\\n    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -ldflags="-X main.v=${{VERSION}}" -o /out/app{s} .',
    'COPY --from={prev} --chown=${{UID:-1000}}:${{UID:-1000}} --chmod=0755 /out/ ${{APP_HOME}}/bin/',
    'LABEL org.opencontainers.image.title="app ${{STEP}}" org.opencontainers.image.version="${{VERSION%.0}}"',
    'EXPOSE ${{PORT:-8080}} ${{METRICS:-9090}}/tcp',
    'USER ${{UID:-1000}}:${{GID:-1000}}',
    'CMD ["/opt/app/bin/app", "--listen", ":8080"]',
]
with open(path, "w") as f:
    f.write("# syntax=docker/dockerfile:1\nARG REGISTRY=docker.io/library\nARG GO_VERSION=1.22\n")
    for i in range(n - 2):
        s = i // len(shapes)
        prev = "build%d" % (s - 1) if s else "alpine:3.19"
        f.write(shapes[i % len(shapes)].format(s=s, prev=prev) + "\n")
PY
echo "# $(grep -c '' "$DF") lines, $N instructions, $(du -h "$DF" | cut -f1)"
stages=$("$KILN" dockerfile plan --build-arg UID=1001 "$DF" | jq '.order | length')
echo "# plan: $stages stages in the build order"

hyperfine -N --warmup 2 --runs 15 --export-json "$WORK/h.json" \
	-n "kiln dockerfile plan" "$KILN dockerfile plan --build-arg UID=1001 $DF" \
	-n "kiln dockerfile parse --json (peer: syntax only)" "$KILN dockerfile parse --json $DF" >/dev/null
python3 - "$WORK/h.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("%-48s median %8.1f ms   (min %.1f, max %.1f, %d runs)" % (
        r["command"], r["median"] * 1000, r["min"] * 1000, r["max"] * 1000, len(r["times"])))
PY
