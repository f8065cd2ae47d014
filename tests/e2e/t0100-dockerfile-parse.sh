#!/usr/bin/env bash
# t0100 — `kiln dockerfile parse`: dumps of real-world-shaped Dockerfiles
# match the reviewed expectations, JSON output carries lines and heredocs,
# errors are FILE:LINE:COL with exit 1, usage errors exit 2.
. tests/e2e/lib.sh
D=tests/data/dockerfiles

for f in "$D"/*.Dockerfile; do
	b=$(basename "$f" .Dockerfile)
	expect_exit 0 "parse --dump $b" "$KILN" dockerfile parse --dump "$f"
	if cmp -s "$T_TMP/out" "$D/$b.dump"; then ok "dump of $b matches"; else
		not_ok "dump of $b matches"
		diff "$D/$b.dump" "$T_TMP/out" | sed 's/^/#   /' | head -20
	fi
done

# The examples the demo uses parse too.
for f in examples/*.Dockerfile; do
	expect_exit 0 "example $(basename "$f") parses" "$KILN" dockerfile parse "$f"
done

# JSON is the default; it is valid JSON with lines, flags and heredocs.
expect_exit 0 "parse (JSON) heredocs example" "$KILN" dockerfile parse "$D/heredocs.Dockerfile"
if python3 - "$T_TMP/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ins = d["instructions"]
assert d["syntax"] == "docker/dockerfile:1", d["syntax"]
cp = [i for i in ins if i["instruction"] == "copy"][0]
assert cp["flags"] == ["--chmod=0755"], cp["flags"]
assert cp["heredocs"][0]["name"] == "SCRIPT" and cp["heredocs"][0]["expand"] is False
assert (cp["start_line"], cp["end_line"]) == (13, 16), (cp["start_line"], cp["end_line"])
two = [i for i in ins if len(i["heredocs"]) == 2][0]
assert [h["name"] for h in two["heredocs"]] == ["CONF", "ENVFILE"]
assert two["heredocs"][0]["chomp"] is True
PY
then ok "JSON has flags, heredocs and lines"; else not_ok "JSON has flags, heredocs and lines"; fi
expect_exit 0 "--json explicit, from stdin" "$KILN" dockerfile parse --json - <"$D/official-shaped.Dockerfile"
expect_grep "stdin JSON names <stdin>" '"file": "<stdin>"' "$T_TMP/out"

# Directives and warnings: the escape directive changes continuations; an
# empty continuation line is a warning on stderr, with its place.
printf '# escape=`\nFROM alpine\nRUN echo \\ `\n\n  done\n' >"$T_TMP/escape"
expect_exit 0 "backtick escape, from stdin" "$KILN" dockerfile parse --dump - <"$T_TMP/escape"
expect_eq "backtick continuation joined" "$(sed -n 2p "$T_TMP/out")" '(run "echo \\   done")'
expect_grep "empty continuation warned with its line" "warning: <stdin>:4:1: empty continuation line" "$T_TMP/err"

# Errors of the syntax layer (BuildKit's parser): FILE:LINE:COL and exit 1.
printf 'FROM alpine\nRUN <<EOF\necho never closed\n' >"$T_TMP/unterminated"
expect_exit 1 "unterminated heredoc exits 1" "$KILN" dockerfile parse --dump "$T_TMP/unterminated"
expect_grep "unterminated heredoc located" "unterminated:2:1: unterminated heredoc" "$T_TMP/err"

# What BuildKit's parser takes and only its instructions.Parse refuses: parse
# dumps it as BuildKit's dumper does; plan (and so build) refuses it with
# FILE:LINE:COL and exit 1.
layers() { # NAME FILE WANT-DUMP WANT-ERROR
	expect_exit 0 "$1: parse takes it" "$KILN" dockerfile parse --dump "$2"
	expect_eq "$1: dumped as BuildKit does" "$(sed -n 2p "$T_TMP/out")" "$3"
	expect_exit 1 "$1: plan refuses it" "$KILN" dockerfile plan "$2"
	expect_grep "$1: plan error located" "$(basename "$2"):$4" "$T_TMP/err"
}
printf 'FROM alpine\n\nRUN --mount=type=nfs,target=/x true\n' >"$T_TMP/bad-mount"
layers "bad mount type" "$T_TMP/bad-mount" '(run ["--mount=type=nfs,target=/x"] "true")' \
	'3:5: unsupported mount type "nfs"'
# --mount's one vocabulary: the check before expansion says what the plan
# says after it, suggestions included (BuildKit's key list has every alias).
printf 'FROM alpine\n\nRUN --mount=type=cache,target=/x,sharing=lockd true\n' >"$T_TMP/bad-sharing"
layers "mount sharing typo" "$T_TMP/bad-sharing" '(run ["--mount=type=cache,target=/x,sharing=lockd"] "true")' \
	'3:5: unsupported sharing value "lockd" \(did you mean locked\?\)'
printf 'FROM alpine\n\nRUN --mount=type=bind,destinaton=/x true\n' >"$T_TMP/bad-key"
layers "mount key typo" "$T_TMP/bad-key" '(run ["--mount=type=bind,destinaton=/x"] "true")' \
	"3:5: unexpected key 'destinaton' in 'destinaton=/x' \\(did you mean destination\\?\\)"
printf 'FROM alpine\n\nRUN --mount=type=secret,id=a,sharing=locked true\n' >"$T_TMP/secret-sharing"
layers "secret mount sharing" "$T_TMP/secret-sharing" '(run ["--mount=type=secret,id=a,sharing=locked"] "true")' \
	'3:5: secret mount should not define sharing'
printf 'FROM alpine\n  FORM x\n' >"$T_TMP/typo"
layers "unknown instruction" "$T_TMP/typo" '(form "")' '2:3: unknown instruction: FORM'
printf 'FROM alpine\nCOPY --chmown=1 a b\n' >"$T_TMP/flag"
layers "unknown flag" "$T_TMP/flag" '(copy ["--chmown=1"] "a" "b")' '2:6: Unknown flag: chmown'
printf 'FROM alpine\nCOPY --user=me a b\n' >"$T_TMP/user"
layers "COPY --user" "$T_TMP/user" '(copy ["--user=me"] "a" "b")' '2:6: Unknown flag: user'
printf 'FROM alpine\nHEALTHCHECK\n' >"$T_TMP/health"
layers "HEALTHCHECK alone" "$T_TMP/health" '(healthcheck)' '2:1: HEALTHCHECK requires at least one argument'
printf 'FROM alpine\nCMD ["\\u0000"]\n' >"$T_TMP/nul-json"
layers "CMD [\"\\u0000\"]" "$T_TMP/nul-json" '(cmd "\x00")' '2:1: a JSON string holds \\u0000'
printf 'FROM alpine\nRUN a\0b\n' >"$T_TMP/nul"
layers "NUL byte" "$T_TMP/nul" '(run "a\x00b")' '2:6: NUL byte in Dockerfile'
printf 'FROM alpine\nONBUILD ONBUILD RUN x\n' >"$T_TMP/onbuild"
layers "ONBUILD ONBUILD" "$T_TMP/onbuild" '(onbuild (onbuild (run "x")))' "2:1: Chaining ONBUILD via \`ONBUILD ONBUILD\` isn't allowed"
mkdir -p "$T_TMP/ctx" && cp "$T_TMP/user" "$T_TMP/ctx/Dockerfile"
expect_exit 1 "build refuses COPY --user" "$KILN" build --no-cache -t t0100:user "$T_TMP/ctx"
expect_grep "build error located" "Dockerfile:2:6: Unknown flag: user" "$T_TMP/err"
printf '# just a comment\n' >"$T_TMP/empty"
expect_exit 1 "no instructions exits 1" "$KILN" dockerfile parse "$T_TMP/empty"
expect_grep "no instructions message" "empty:1:1: file with no instructions" "$T_TMP/err"
printf 'FROM a\nENV PATH\n' >"$T_TMP/env"
expect_exit 1 "ENV without value exits 1" "$KILN" dockerfile parse "$T_TMP/env"
expect_grep "ENV without value located" "env:2:1: ENV must have two arguments" "$T_TMP/err"
expect_exit 1 "missing file exits 1" "$KILN" dockerfile parse "$T_TMP/does-not-exist"
expect_grep "missing file named" "does-not-exist" "$T_TMP/err"

# Usage errors exit 2.
expect_exit 2 "no file is a usage error" "$KILN" dockerfile parse
expect_exit 2 "unknown option is a usage error" "$KILN" dockerfile parse --yaml "$D/c-build.Dockerfile"
expect_exit 2 "unknown sub-command is a usage error" "$KILN" dockerfile frobnicate
expect_exit 0 "parse --help" "$KILN" dockerfile parse --help
expect_grep "help shows usage" "Usage: kiln dockerfile parse" "$T_TMP/out"
