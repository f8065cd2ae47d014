#!/usr/bin/env bash
# t0150-dockerfile-plan.sh — `kiln dockerfile plan`: an ARG-heavy multi-stage
# Dockerfile expanded with --build-arg, --target and --platform; stdin;
# errors with FILE:LINE:COL and exit codes 1 (bad Dockerfile, unknown
# target) and 2 (usage).
. tests/e2e/lib.sh

D=$T_TMP/Dockerfile
cat >"$D" <<'DF'
# syntax=docker/dockerfile:1
ARG GO_VERSION=1.22
ARG ALPINE_VERSION=3.19
ARG REGISTRY=docker.io/library

FROM --platform=$BUILDPLATFORM ${REGISTRY}/golang:${GO_VERSION}-alpine AS Build
ARG TARGETOS TARGETARCH
ARG VERSION=dev
ENV CGO_ENABLED=0 \
    GOFLAGS="-trimpath -mod=readonly"
WORKDIR /src
COPY --link go.mod go.sum ./
RUN --mount=type=cache,target=/root/.cache/go-build,id=go-$TARGETARCH \
    GOOS=$TARGETOS GOARCH=$TARGETARCH go build -ldflags "-X main.version=$VERSION" -o /out/app .

FROM build AS test
RUN go test ./...

FROM ${REGISTRY}/alpine:${ALPINE_VERSION} AS runtime
ARG VERSION
ARG UID=10001
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.title="app ${VERSION:-unknown}"
RUN adduser -D -u ${UID} app
COPY --from=build --chown=${UID}:${UID} /out/app /usr/local/bin/app
COPY --from=1 /src/go.mod /doc/
USER ${UID}
EXPOSE 8080 ${METRICS_PORT:-9090}/tcp
ENTRYPOINT ["/usr/local/bin/app"]
DF

expect_exit 0 "plan of a multi-stage Dockerfile" "$KILN" dockerfile plan "$D"
cp "$T_TMP/out" "$T_TMP/default.json"
expect_eq "output is JSON" "$(jq -r type "$T_TMP/default.json")" "object"
expect_eq "default target is the last stage" "$(jq -c '[.target, .target_name]' "$T_TMP/default.json")" '[2,"runtime"]'
expect_eq "build order: only what runtime needs, deps first" "$(jq -c .order "$T_TMP/default.json")" '[0,1,2]'
expect_eq "FROM expanded with global ARGs" "$(jq -r '.stages[0].base' "$T_TMP/default.json")" "docker.io/library/golang:1.22-alpine"
expect_eq "stage names are lowercased" "$(jq -r '.stages[0].name' "$T_TMP/default.json")" "build"
expect_eq "FROM <stage> is a stage base" "$(jq -c '[.stages[1].base, .stages[1].base_stage]' "$T_TMP/default.json")" '["build",0]'
expect_eq "--platform=\$BUILDPLATFORM" "$(jq -r '.stages[0].platform' "$T_TMP/default.json")" "linux/amd64"
expect_eq "runtime deps (COPY --from=build, --from=1)" "$(jq -c '.stages[2].deps' "$T_TMP/default.json")" '[0,1]'
expect_eq "--mount parsed, its values expanded" \
	"$(jq -c '.stages[0].steps[5].mounts[] | [.type, .target, .id, .sharing, .mode, .readonly]' "$T_TMP/default.json")" \
	'["cache","/root/.cache/go-build","go-amd64","shared","0755",false]'
expect_eq "RUN command left to the shell" "$(jq -r '.stages[0].steps[5].args[0]' "$T_TMP/default.json")" \
	'GOOS=$TARGETOS GOARCH=$TARGETARCH go build -ldflags "-X main.version=$VERSION" -o /out/app .'
expect_eq "RUN env: ENV + ARGs in scope" "$(jq -c '.stages[0].steps[5].env' "$T_TMP/default.json")" \
	'["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","TARGETOS=linux","TARGETARCH=amd64","VERSION=dev","CGO_ENABLED=0","GOFLAGS=-trimpath -mod=readonly"]'
expect_eq "WORKDIR tracked" "$(jq -r '.stages[0].steps[5].workdir' "$T_TMP/default.json")" "/src"
expect_eq "global VERSION not inherited without a value in runtime" \
	"$(jq -c '.stages[2].steps[0].kvs' "$T_TMP/default.json")" '[{"key":"VERSION","value":null}]'
expect_eq "LABEL expanded" "$(jq -c '[.stages[2].steps[2].kvs[].value]' "$T_TMP/default.json")" '["","app unknown"]'
expect_eq "COPY --chown expanded, --from resolved" \
	"$(jq -c '.stages[2].steps[4] | [(.flags[] | select(.name=="chown") | .value), .from_stage]' "$T_TMP/default.json")" \
	'["10001:10001",0]'
expect_eq "COPY --from=<index>" "$(jq -r '.stages[2].steps[5].from_stage' "$T_TMP/default.json")" "1"
expect_eq "EXPOSE split and expanded" "$(jq -c '.stages[2].steps[7].args' "$T_TMP/default.json")" '["8080","9090/tcp"]'
expect_eq "USER tracked" "$(jq -r '.stages[2].steps[7].user' "$T_TMP/default.json")" "10001"

expect_exit 0 "plan with --build-arg, --target, --platform" "$KILN" dockerfile plan \
	--build-arg VERSION=1.2.3 --build-arg GO_VERSION=1.23 --build-arg NOT_USED=1 \
	--target TEST --platform linux/arm64 "$D"
cp "$T_TMP/out" "$T_TMP/test.json"
expect_eq "--target selects the stage, case-insensitively" "$(jq -c '[.target, .order]' "$T_TMP/test.json")" '[1,[0,1]]'
expect_eq "--build-arg overrides a global ARG" "$(jq -r '.stages[0].base' "$T_TMP/test.json")" "docker.io/library/golang:1.23-alpine"
expect_eq "--build-arg overrides a stage ARG default" \
	"$(jq -r '.stages[0].steps[5].env[] | select(startswith("VERSION="))' "$T_TMP/test.json")" "VERSION=1.2.3"
expect_eq "--platform sets TARGETARCH" \
	"$(jq -r '.stages[0].steps[5].env[] | select(startswith("TARGETARCH="))' "$T_TMP/test.json")" "TARGETARCH=arm64"
expect_eq "FROM build inherits its env" "$(jq -r '.stages[1].steps[0].env | length' "$T_TMP/test.json")" "6"
expect_eq "unreachable stage not expanded" "$(jq -c '[.stages[2].reachable, (.stages[2].steps | length)]' "$T_TMP/test.json")" '[false,0]'
expect_eq "unused build arg is a warning" "$(jq -r '.warnings[0]' "$T_TMP/test.json")" \
	"build-arg NOT_USED was not consumed by any ARG instruction"
expect_grep "warning also on stderr" 'warning: build-arg NOT_USED' "$T_TMP/err"

expect_exit 0 "plan from stdin" sh -c "printf 'FROM alpine\nARG A=x\nRUN echo \$A\n' | '$KILN' dockerfile plan -"
expect_eq "stdin plan" "$(jq -c '.stages[0].steps[1].env[1:]' "$T_TMP/out")" '["A=x"]'

# errors in the Dockerfile: exit 1, FILE:LINE:COL
expect_exit 1 "unknown target exits 1" "$KILN" dockerfile plan --target nope "$D"
expect_grep "unknown target lists the stages" 'target stage "nope" could not be found; the stages are: build, test, runtime' "$T_TMP/err"

printf 'FROM alpine AS a\nCOPY --from=c /x /x\nFROM alpine AS b\nCOPY --from=a /x /x\nFROM alpine AS c\nCOPY --from=b /x /x\n' >"$T_TMP/cycle"
expect_exit 1 "cycle exits 1" "$KILN" dockerfile plan "$T_TMP/cycle"
expect_grep "cycle reported at its line" "cycle:4:1: circular dependency detected on stage: a \(a -> c -> b -> a\)" "$T_TMP/err"

printf 'FROM alpine\nCOPY --from=1 /x /x\nFROM alpine\n' >"$T_TMP/fwd"
expect_exit 1 "numeric --from of a later stage exits 1" "$KILN" dockerfile plan "$T_TMP/fwd"
expect_grep "numeric --from error" 'fwd:2:1: invalid stage index 1' "$T_TMP/err"

printf 'FROM alpine\nARG NAME\n\n  WORKDIR /home/${NAME:?NAME must be set}\n' >"$T_TMP/required"
expect_exit 1 "\${v:?} unset exits 1" "$KILN" dockerfile plan "$T_TMP/required"
expect_grep "\${v:?} message with location" 'required:4:3: failed to process .*NAME: NAME must be set' "$T_TMP/err"
expect_exit 0 "\${v:?} satisfied by --build-arg" "$KILN" dockerfile plan --build-arg NAME=me "$T_TMP/required"
expect_eq "... and expanded" "$(jq -r '.stages[0].steps[1].workdir' "$T_TMP/out")" "/home/me"

printf 'FROM alpine\nENV A=${B\n' >"$T_TMP/badsubst"
expect_exit 1 "bad substitution exits 1" "$KILN" dockerfile plan "$T_TMP/badsubst"
expect_grep "bad substitution message" "badsubst:2:1: failed to process .*missing '}'" "$T_TMP/err"

# usage errors: exit 2
expect_exit 2 "no FILE exits 2" "$KILN" dockerfile plan
expect_exit 2 "empty --build-arg name exits 2" "$KILN" dockerfile plan --build-arg =x "$D"
expect_exit 2 "bad --platform exits 2" "$KILN" dockerfile plan --platform linux/ "$D"
expect_grep "bad --platform message" 'invalid platform "linux/"' "$T_TMP/err"
expect_exit 2 "unknown option exits 2" "$KILN" dockerfile plan --bogus "$D"
expect_exit 0 "plan --help" "$KILN" dockerfile plan --help
expect_grep "usage names the options" 'build-arg' "$T_TMP/out"

# a bare --build-arg K takes $K from the environment, as docker build does
printf 'FROM alpine\nARG FOO\nENV X=${FOO:?}\n' >"$T_TMP/bare"
expect_exit 1 "bare --build-arg with K unset: K stays unset" env -u FOO "$KILN" dockerfile plan --build-arg FOO "$T_TMP/bare"
expect_grep "... so \${FOO:?} fails" 'bare:3:1: failed to process "\$\{FOO:\?\}": FOO: is not allowed to be unset' "$T_TMP/err"
expect_exit 0 "bare --build-arg with K set" env FOO=fromenv "$KILN" dockerfile plan --build-arg FOO "$T_TMP/bare"
expect_eq "... takes its value" "$(jq -r '.stages[0].steps[1].kvs[0].value' "$T_TMP/out")" "fromenv"

# ... and kiln build agrees (one parser for the flag, buildx's rule: K not in
# the environment is left out, so the Dockerfile's default applies)
mkdir -p "$T_TMP/ctx-ba"
printf 'FROM scratch\nARG FOO=dflt\nENV X=$FOO\n' >"$T_TMP/ctx-ba/Dockerfile"
env_x() { python3 - "$1" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/blobs/sha256/" + json.load(open(d + "/index.json"))["manifests"][0]["digest"][7:]))
c = json.load(open(d + "/blobs/sha256/" + m["config"]["digest"][7:]))
print([e for e in c["config"]["Env"] if e.startswith("X=")][0])
PY
}
for v in unset fromenv; do
	if [ $v = unset ]; then run_env="env -u FOO"; want=X=dflt; else run_env="env FOO=fromenv"; want=X=fromenv; fi
	expect_exit 0 "plan, bare --build-arg FOO, FOO $v" $run_env "$KILN" dockerfile plan --build-arg FOO "$T_TMP/ctx-ba/Dockerfile"
	expect_eq "plan: $want" "$(jq -r '.stages[0].steps[1].env[] | select(startswith("X="))' "$T_TMP/out")" "$want"
	expect_exit 0 "build, bare --build-arg FOO, FOO $v" $run_env "$KILN" build --build-arg FOO --oci-out "$T_TMP/oci-ba-$v" "$T_TMP/ctx-ba"
	expect_eq "build: $want, as the plan" "$(env_x "$T_TMP/oci-ba-$v")" "$want"
done
expect_exit 2 "build: empty --build-arg name exits 2, as plan" "$KILN" build --build-arg =x "$T_TMP/ctx-ba"

# FROM with an empty ARG is a bad reference, as BuildKit reports it
printf 'ARG TAG\nFROM alpine:$TAG\n' >"$T_TMP/emptytag"
expect_exit 1 "empty tag exits 1" "$KILN" dockerfile plan "$T_TMP/emptytag"
expect_grep "empty tag message" 'emptytag:2:1: failed to parse stage name "alpine:": invalid reference format' "$T_TMP/err"
printf 'FROM alpine:${TAG:-3.19}\n' >"$T_TMP/undeclared"
expect_exit 0 "undeclared FROM arg only warns" "$KILN" dockerfile plan "$T_TMP/undeclared"
expect_grep "UndefinedArgInFrom warning" "undeclared:1:1: FROM argument 'TAG' is not declared" "$T_TMP/err"

# BuildKit's instruction checks run in plan (parse takes these), over every
# stage, the unbuilt ones too, before anything is expanded
printf 'FROM alpine AS unused\nCOPY --user=me a b\nFROM alpine\nRUN true\n' >"$T_TMP/unbuilt"
expect_exit 0 "parse takes an unknown flag" "$KILN" dockerfile parse "$T_TMP/unbuilt"
expect_exit 1 "plan refuses it in a stage not built" "$KILN" dockerfile plan "$T_TMP/unbuilt"
expect_grep "... located" 'unbuilt:2:6: Unknown flag: user' "$T_TMP/err"
printf 'FROM alpine\nHEALTHCHECK --interval=5 CMD true\n' >"$T_TMP/hc"
expect_exit 1 "plan refuses a HEALTHCHECK duration without unit" "$KILN" dockerfile plan "$T_TMP/hc"
expect_grep "... located at the flag" 'hc:2:13: time: missing unit in duration "5"' "$T_TMP/err"
printf 'FROM alpine\nONBUILD COPY --bogus a b\n' >"$T_TMP/trig"
expect_exit 0 "a bad ONBUILD trigger only warns" "$KILN" dockerfile plan "$T_TMP/trig"
expect_grep "... with its place" 'warning: .*trig:2:14: Unknown flag: bogus \(in an ONBUILD trigger' "$T_TMP/err"
