#!/usr/bin/env bash
# demo.sh — `make demo`: the main job on embedded defaults, as far as kiln's
# stages exist today: parse each example Dockerfile (BuildKit's dump format),
# expand it into a build plan, and show which stages a build would run.
set -euo pipefail
cd "$(dirname "$0")/.."
KILN=${KILN:-bin/kiln}
for df in examples/*.Dockerfile; do
	echo "=== $df"
	"$KILN" dockerfile parse --dump "$df"
	plan=$("$KILN" dockerfile plan "$df")
	echo "--- build plan: stages to build, in order"
	jq -r '.order[] as $i | .stages[$i] |
		"  stage \(.index) \(.name // "-"): FROM \(.base), \(.steps | length) steps"' <<<"$plan"
	echo
done
echo "kiln demo: parsed and planned $(ls examples/*.Dockerfile | wc -l) Dockerfiles"
