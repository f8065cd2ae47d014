#!/usr/bin/env bash
# t0860-references.sh — one reference syntax in every command: kiln run,
# kiln sandbox create/pool, kiln push, kiln pull and FROM take NAME:TAG,
# REGISTRY/REPO:TAG and NAME@sha256 / REGISTRY/REPO@sha256; a registry
# reference that is not on the host is pulled first (progress on a terminal)
# and one that is here is used without the network; a pulled template keeps
# its full reference as its name (the short REPO:TAG resolves while only one
# registry's is here); asking for an image where a template is wanted (or
# the other way round) says what exists and what makes the other.  One
# template built once, two `kiln serve` on 127.0.0.1.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
. tests/e2e/registry-lib.sh
vm_setup

export SOURCE_DATE_EPOCH=1700000000
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

c=$T_TMP/ctx
mkdir -p "$c"
echo "app one" >"$c/app.txt"
printf 'FROM oci:%s:base\nCOPY app.txt /app/app.txt\n' "$B" >"$c/Dockerfile"
expect_exit 0 "build the template app:v1" "$KILN" build -t app:v1 --start-cmd 'echo up >/tmp/up' \
	--ready-cmd 'test -f /tmp/up' --memory 128 "$c"
expect_exit 0 "build the image img:v1 (no --template)" "$KILN" build -t img:v1 "$c"
IMGD=$(head -1 "$T_TMP/out")
expect_grep "...which says kiln run needs a template, and how to make one" \
	'img:v1 is an image; kiln run needs a template: add --template, or `kiln snapshot img:v1`' "$T_TMP/err"
D=$("$KILN" snapshot ls --json | jq -r '.[] | select(.name == "app:v1") | .digest')
BUILDER=$KILN_HOME

# -- kiln run: local forms ---------------------------------------------------------
expect_eq "kiln run NAME:TAG" "$("$KILN" run app:v1 -- cat /app/app.txt 2>/dev/null)" "app one"
expect_eq "kiln run NAME@sha256 (the template's digest)" "$("$KILN" run "app@$D" -- cat /app/app.txt 2>/dev/null)" \
	"app one"
expect_exit 1 "kiln run NAME@sha256 of another digest fails" "$KILN" run "app@$IMGD" -- true
expect_grep "...naming it" "no template app@$IMGD" "$T_TMP/err"
expect_exit 1 "kiln run of an image that is no template fails" "$KILN" run img:v1 -- true
expect_grep "...saying it is an image and what makes the template" \
	'img:v1 is an image, not a template; build it with --template, or `kiln snapshot img:v1`' "$T_TMP/err"
expect_exit 1 "kiln run of a name that is nothing fails" "$KILN" run nosuch:v1 -- true
expect_grep "...saying so and where templates are listed" "no template nosuch:v1.*kiln snapshot ls" "$T_TMP/err"
expect_exit 1 "kiln run of a bad reference fails" "$KILN" run 'App:v1' -- true
expect_grep "...naming the bad part" "bad repository name \"App\": 'A' is not allowed" "$T_TMP/err"

reg_start "$T_TMP/reg" || exit 0
REG1=$REG REG1_PID=$REG_PID

# -- kiln push ----------------------------------------------------------------------
expect_exit 0 "push NAME:TAG REGISTRY/REPO:TAG (a template)" "$KILN" push app:v1 "$REG1/team/app:v1"
M=$(cat "$T_TMP/out")
expect_exit 0 "push an image" "$KILN" push img:v1 "$REG1/team/img:v1"
expect_exit 1 "push --template of an image fails" "$KILN" push --template img:v1 "$REG1/team/x:v1"
expect_grep "...saying it is an image and which flag fits" \
	"img:v1 is an image, not a template; push it without --template, or make the template first" "$T_TMP/err"
expect_exit 1 "push of a name that is nothing fails" "$KILN" push nothing:v1 "$REG1/team/x:v1"
expect_grep "...saying where to look" "no image or template nothing:v1 here \(kiln images, kiln snapshot ls\)" "$T_TMP/err"

# -- kiln run / sandbox create / sandbox pool of a registry reference not on the host -------
H2=$T_TMP/host2
got=$(KILN_HOME=$H2 "$KILN" run "$REG1/team/app:v1" -- cat /app/app.txt 2>"$T_TMP/run.err")
expect_eq "kiln run REGISTRY/REPO:TAG on a host without it pulls it and runs" "$got" "app one"
expect_grep "...saying it pulls" "template $REG1/team/app:v1 is not on this host: pulling it" "$T_TMP/run.err"
expect_grep "...and what moved" "pull template $REG1/team/app:v1: received" "$T_TMP/run.err"
expect_eq "...stored under its full reference, with the builder's digest" \
	"$(cat "$H2/snapshots/refs/$REG1/team/app/v1" 2>/dev/null)" "$D"
expect_eq "the short REPO:TAG resolves to it" \
	"$(KILN_HOME=$H2 "$KILN" run team/app:v1 -- cat /app/app.txt 2>/dev/null)" "app one"
expect_exit 1 "push --image of a template-only name fails" env KILN_HOME="$H2" "$KILN" push --image "$REG1/team/app:v1"
expect_grep "...saying it is a template and which flag fits" \
	"$REG1/team/app:v1 is a template, not an image; push it without --image" "$T_TMP/err"
expect_exit 0 "push REGISTRY/REPO:TAG (its own name: one argument)" env KILN_HOME="$H2" "$KILN" push "$REG1/team/app:v1"
expect_exit 0 "push REGISTRY/REPO:TAG to another repository" env KILN_HOME="$H2" "$KILN" push "$REG1/team/app:v1" \
	"$REG1/moved/app:v1"

H3=$T_TMP/host3
id=$(KILN_HOME=$H3 "$KILN" sandbox create "$REG1/team/app@$M" 2>"$T_TMP/create.err")
expect_eq "kiln sandbox create REGISTRY/REPO@sha256 pulls it and starts a sandbox" \
	"$(KILN_HOME=$H3 "$KILN" sandbox exec "$id" -- cat /app/app.txt 2>/dev/null)" "app one"
KILN_HOME=$H3 "$KILN" sandbox kill "$id" >/dev/null 2>&1
expect_eq "...named REGISTRY/REPO@sha256 in kiln snapshot ls" \
	"$(KILN_HOME=$H3 "$KILN" snapshot ls --json | jq -r '.[0].name')" "$REG1/team/app@$M"
expect_eq "...which runs by that name" \
	"$(KILN_HOME=$H3 "$KILN" run "$REG1/team/app@$M" -- cat /app/app.txt 2>/dev/null)" "app one"

H4=$T_TMP/host4
expect_exit 0 "kiln sandbox pool REGISTRY/REPO:TAG pulls it and fills the pool" env KILN_HOME="$H4" \
	"$KILN" sandbox pool -n 1 "$REG1/team/app:v1"
expect_eq "...with one sandbox" "$(KILN_HOME=$H4 "$KILN" sandbox ls --json | jq '[.[] | select(.state == "pooled")] | length')" 1
expect_eq "kiln run claims it by the same reference" \
	"$(KILN_HOME=$H4 "$KILN" run "$REG1/team/app:v1" -- cat /app/app.txt 2>/dev/null)" "app one"
KILN_HOME=$H4 "$KILN" sandbox pool -n 0 "$REG1/team/app:v1" >/dev/null 2>&1
sleep 1 # the refill a claim starts in the background
KILN_HOME=$H4 "$KILN" sandbox pool -n 0 "$REG1/team/app:v1" >/dev/null 2>&1

H7=$T_TMP/host7
script -qec "env KILN_HOME=$H7 $KILN run $REG1/team/app:v1 -- cat /app/app.txt" /dev/null >"$T_TMP/tty" 2>&1
expect_grep "on a terminal, the pull before the run draws progress" 'pull template: [0-9]+/[0-9]+ blobs' "$T_TMP/tty"
expect_grep "...then the command's output" "app one" "$T_TMP/tty"

# -- kiln pull -------------------------------------------------------------------------
H5=$T_TMP/host5
expect_exit 0 "kiln pull REGISTRY/REPO:TAG" env KILN_HOME="$H5" "$KILN" pull "$REG1/team/app:v1"
expect_eq "...prints the builder's template digest" "$(cat "$T_TMP/out")" "$D"
reg_start "$T_TMP/reg2" || exit 0
REG2=$REG REG2_PID=$REG_PID
expect_exit 0 "the same REPO:TAG pushed to a second registry" "$KILN" push app:v1 "$REG2/team/app:v1"
expect_exit 0 "...and pulled from there too" env KILN_HOME="$H5" "$KILN" pull "$REG2/team/app:v1"
expect_exit 2 "then the short REPO:TAG is ambiguous" env KILN_HOME="$H5" "$KILN" run team/app:v1 -- true
expect_grep "...and the error names both" "pulled from several registries \(.*$REG1/team/app:v1.*$REG2/team/app:v1|.*$REG2/team/app:v1.*$REG1/team/app:v1" "$T_TMP/err"
expect_eq "...while each full reference runs" \
	"$(KILN_HOME=$H5 "$KILN" run "$REG2/team/app:v1" -- cat /app/app.txt 2>/dev/null)" "app one"

# -- an image pushed where a template was meant ----------------------------------------
H6=$T_TMP/host6
expect_exit 1 "kiln run of a registry image (built without --template) fails" env KILN_HOME="$H6" \
	"$KILN" run "$REG1/team/img:v1" -- true
expect_grep "...saying it is an image and how to get a template" \
	"$REG1/team/img:v1 is an image, not a template: it was pushed from an image \(kiln build without --template\); push a template instead.*kiln snapshot $REG1/team/img:v1" "$T_TMP/err"
expect_exit 0 "kiln pull of that image" env KILN_HOME="$H6" "$KILN" pull "$REG1/team/img:v1"
expect_exit 1 "...then kiln run of it fails" env KILN_HOME="$H6" "$KILN" run "$REG1/team/img:v1" -- true
expect_grep "...saying how to make the template here" "kiln pull $REG1/team/img:v1 && kiln snapshot $REG1/team/img:v1" \
	"$T_TMP/err"

# -- FROM -------------------------------------------------------------------------------
f=$T_TMP/from
mkdir -p "$f"
printf 'FROM %s/team/img:v1\nCOPY app.txt /b.txt\n' "$REG1" >"$f/Dockerfile"
cp "$c/app.txt" "$f/"
expect_exit 0 "FROM REGISTRY/REPO:TAG (an image)" "$KILN" build -t from:reg "$f"
printf 'FROM img@%s\nCOPY app.txt /b.txt\n' "$IMGD" >"$f/Dockerfile"
expect_exit 0 "FROM NAME@sha256 (a local image)" "$KILN" build -t from:digest "$f"
printf 'FROM img:v1\nCOPY app.txt /b.txt\n' >"$f/Dockerfile"
expect_exit 0 "FROM NAME:TAG (a local image)" "$KILN" build -t from:local "$f"
printf 'FROM %s/team/app:v1\nCOPY app.txt /b.txt\n' "$REG1" >"$f/Dockerfile"
expect_exit 1 "FROM a registry template fails" "$KILN" build -t from:tmpl "$f"
expect_grep "...saying it is a template and what FROM wants" \
	"$REG1/team/app:v1 is a kiln template, not an image: kiln run and kiln sandbox create take it" "$T_TMP/err"

# -- present: no network ---------------------------------------------------------------
kill "$REG1_PID" "$REG2_PID" 2>/dev/null
wait "$REG1_PID" "$REG2_PID" 2>/dev/null
REG_PID=
expect_eq "with the registries gone, a pulled REGISTRY/REPO:TAG still runs (no network)" \
	"$(KILN_HOME=$H2 "$KILN" run "$REG1/team/app:v1" -- cat /app/app.txt 2>"$T_TMP/off.err")" "app one"
expect_eq "...and pulls nothing" "$(grep -c pulling "$T_TMP/off.err")" 0
for h in "$BUILDER" "$H2" "$H3" "$H4" "$H5" "$H6" "$H7"; do KILN_HOME=$h "$KILN" sandbox gc >/dev/null 2>&1; done
