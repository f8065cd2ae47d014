#!/usr/bin/env bash
# t0620-sandbox-life.sh — what a sandbox is given and how long it lives, on one
# template and a few sandboxes: env (-e, --env-file) and labels at create
# (ls shows and filters them), exec's -e/-w/-u/-i, detached processes and
# their logs, cp in and out (owner, mode, a name that is not UTF-8), a 3 s
# timeout that removes the sandbox with no kiln running (QEMU, directory, RAM
# copy), `kiln sandbox timeout` extending one, gc removing an expired one
# whose watcher died, and kiln run's -e/--timeout.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
SB="$KILN_HOME/sandboxes"
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n' >"$T_TMP/root/etc/passwd"
printf 'root:x:0:\napp:x:1000:\n' >"$T_TMP/root/etc/group"
mkdir -p "$T_TMP/root/home/app"
expect_exit 0 "rootfs" $KILN rootfs --from-dir "$T_TMP/root" -o "$T_TMP/life.ext4" --free 16M
expect_exit 0 "template with env" $KILN snapshot -t life:v1 -e A=tmpl -e B=tmpl "$T_TMP/life.ext4"
cleanup() { $KILN sandbox kill $(ls "$SB" 2>/dev/null) >/dev/null 2>&1; rm -rf "$T_TMP"; }
trap cleanup EXIT
state() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$SB/$1/state.json" "$2"; }

# --- env, labels ------------------------------------------------------------
printf '# a comment\nC=file\n\nFROMHOST\nUNSET_HERE\n' >"$T_TMP/envfile"
export FROMHOST=host-value
expect_exit 0 "create with -e, --env-file, labels and a timeout" \
	$KILN sandbox create -e B=create --env-file "$T_TMP/envfile" -l team=red -l app=web --timeout 10m life:v1
a=$(cat "$T_TMP/out")
expect_exit 0 "every exec gets the template's env with the sandbox's over it" \
	$KILN sandbox exec "$a" -- sh -c 'echo $A $B $C $FROMHOST ${UNSET_HERE-unset}'
expect_eq "...A from the template, B from -e, C and FROMHOST from the file" "$(cat "$T_TMP/out")" \
	"tmpl create file host-value unset"
expect_exit 0 "exec -e -w -u" $KILN sandbox exec -e C=exec -e D=new -w /tmp -u app "$a" -- \
	sh -c 'echo $B $C $D $(pwd) $(id -u) $HOME'
expect_eq "...override, add, workdir, user and its HOME" "$(cat "$T_TMP/out")" "create exec new /tmp 1000 /home/app"
expect_exit 2 "-e without a value is a usage error" $KILN sandbox exec -e NOVALUE "$a" -- true
expect_exit 0 "exec -i feeds stdin" sh -c "printf 'line1\nline2\n' | $KILN sandbox exec -i $a -- sh -c 'wc -l; echo end'"
expect_eq "...and the command saw all of it" "$(tr -s ' \n' ' ' <"$T_TMP/out")" "2 end "
expect_exit 0 "a second sandbox without labels" $KILN sandbox create --timeout 0 life:v1
b=$(cat "$T_TMP/out")
expect_exit 0 "ls" $KILN sandbox ls
expect_grep "ls shows the labels" "^$a .* (app=web,team=red|team=red,app=web)$" "$T_TMP/out"
expect_grep "...and the time left" "^$a .* 9m5[0-9]s " "$T_TMP/out"
expect_exit 0 "ls --filter label=team=red --json" $KILN sandbox ls --filter label=team=red --json
expect_eq "...lists only that one" "$(jq -r '.[].id' "$T_TMP/out")" "$a"
expect_eq "...with its labels" "$(jq -r '.[0].labels.app' "$T_TMP/out")" "web"
expect_exit 0 "ls --filter label=team=blue" $KILN sandbox ls --filter label=team=blue --json
expect_eq "...lists none" "$(jq length "$T_TMP/out")" "0"
expect_exit 0 "ls -f label=app -f state=running" $KILN sandbox ls -f label=app -f state=running --json
expect_eq "...key only, both filters" "$(jq -r '.[].id' "$T_TMP/out")" "$a"
expect_exit 2 "an unknown filter is a usage error" $KILN sandbox ls --filter colour=red

# --- detached processes -------------------------------------------------------
expect_exit 0 "exec --detach prints a pid" $KILN sandbox exec --detach "$a" -- \
	sh -c 'echo out-$B; echo err-1 >&2; sleep 1; echo out-2; exit 5'
pid=$(cat "$T_TMP/out")
expect_grep "...a number" '^[0-9]+$' "$T_TMP/out"
# up to 30 s: a TCG guest on a loaded host takes its time over the 1 s sleep
for i in $(seq 150); do
	$KILN sandbox logs "$a" "$pid" >"$T_TMP/lo" 2>"$T_TMP/le"
	grep -q 'exit 5' "$T_TMP/le" && break
	sleep 0.2
done
expect_eq "logs: its stdout (it outlived the exec)" "$(cat "$T_TMP/lo")" "$(printf 'out-create\nout-2')"
expect_grep "...its stderr" '^err-1$' "$T_TMP/le"
expect_grep "...and how it ended" 'process [0-9]+: exit 5$' "$T_TMP/le"
expect_exit 1 "logs of a pid never detached" $KILN sandbox logs "$a" 99999
expect_grep "...says so" "no detached process 99999" "$T_TMP/err"

# --- cp -------------------------------------------------------------------
name=$(printf 'caf\xe9')
mkdir -p "$T_TMP/src/sub"
echo hello >"$T_TMP/src/a.txt"
printf 'latin-1' >"$T_TMP/src/sub/$name"
chmod 0640 "$T_TMP/src/a.txt"
chown 1000:1000 "$T_TMP/src/a.txt"
ln -s a.txt "$T_TMP/src/link"
expect_exit 0 "cp a tree into an existing directory" $KILN sandbox cp "$T_TMP/src" "$a:/tmp"
expect_exit 0 "...listed in the guest" $KILN sandbox exec "$a" -- sh -c \
	'stat -c "%a %u:%g %n" /tmp/src/a.txt; readlink /tmp/src/link; cat /tmp/src/sub/*'
expect_eq "...owner, mode, symlink, a non-UTF-8 name's file" "$(cat "$T_TMP/out")" \
	"$(printf '640 1000:1000 /tmp/src/a.txt\na.txt\nlatin-1')"
expect_exit 0 "cp a file to a new name" $KILN sandbox cp "$T_TMP/src/a.txt" "$a:/home/app/renamed"
expect_exit 0 "...is there" $KILN sandbox exec "$a" -- cat /home/app/renamed
expect_eq "...with its content" "$(cat "$T_TMP/out")" "hello"
expect_exit 0 "cp a tree out" $KILN sandbox cp "$a:/tmp/src" "$T_TMP/back"
expect_eq "...the same names (bytes), modes, owners and link" \
	"$(cd "$T_TMP/back" && find . -printf '%p %m %U:%G %l\n' | sort)" \
	"$(cd "$T_TMP/src" && find . -printf '%p %m %U:%G %l\n' | sort)"
expect_eq "...and contents" "$(cat "$T_TMP/back/sub/$name")" "latin-1"
mkdir "$T_TMP/into"
expect_exit 0 "cp a file out into a directory" $KILN sandbox cp "$a:/etc/passwd" "$T_TMP/into"
expect_grep "...under its own name" '^app:x:1000' "$T_TMP/into/passwd"
expect_exit 1 "cp of a missing file" $KILN sandbox cp "$a:/no/such" "$T_TMP/x"
expect_grep "...says it is missing" "No such file or directory" "$T_TMP/err"
expect_exit 2 "cp without a sandbox side" $KILN sandbox cp "$T_TMP/src" "$T_TMP/y"

# --- timeouts ---------------------------------------------------------------
expect_exit 0 "create with --timeout 3s" $KILN sandbox create --timeout 3s life:v1
c=$(cat "$T_TMP/out")
cpid=$(state "$c" pid)
ram=$(readlink "$SB/$c/ram")
expect_exit 0 "...it runs" $KILN sandbox exec "$c" -- true
for i in $(seq 60); do [ -d "$SB/$c" ] || break; sleep 0.2; done
[ ! -d "$SB/$c" ] && ok "the 3 s sandbox is removed at its timeout with no kiln running" ||
	not_ok "the 3 s sandbox is still there after 12 s"
for i in $(seq 20); do [ -e "/proc/$cpid/cmdline" ] && [ -s "/proc/$cpid/cmdline" ] || break; sleep 0.1; done
[ -s "/proc/$cpid/cmdline" ] && not_ok "...its QEMU ($cpid) still runs" || ok "...its QEMU is gone"
[ -n "$ram" ] && [ ! -e "$ram" ] && ok "...and its RAM copy ($ram)" || not_ok "...its RAM copy $ram is left"
expect_exit 1 "exec in it fails" $KILN sandbox exec "$c" -- true

expect_exit 0 "create with --timeout 3s again" $KILN sandbox create --timeout 3s life:v1
d=$(cat "$T_TMP/out")
expect_exit 0 "kiln sandbox timeout extends it to 1m" $KILN sandbox timeout "$d" 1m
sleep 4
expect_exit 0 "...it still runs after 4 s" $KILN sandbox exec "$d" -- true
expect_exit 0 "timeout 2s" $KILN sandbox timeout "$d" 2s
for i in $(seq 40); do [ -d "$SB/$d" ] || break; sleep 0.2; done
[ ! -d "$SB/$d" ] && ok "...a shortened timeout removes it too" || not_ok "...still there after 8 s"
expect_exit 1 "timeout of an unknown sandbox" $KILN sandbox timeout 0123456789ab 1m
expect_exit 2 "a bad duration is a usage error" $KILN sandbox timeout "$a" soon

# A crashed host: the watcher is gone, the sandbox expired; gc removes it.
# (6 s: on a loaded host 2 s ran out before the watcher was found and killed)
expect_exit 0 "create with --timeout 6s" $KILN sandbox create --timeout 6s life:v1
e=$(cat "$T_TMP/out")
# the watcher's command line is its parent's (kiln sandbox create ...): find it by its lock
w=$(for p in $(pgrep -x kiln-watch); do ls -l /proc/$p/fd 2>/dev/null | grep -q "$e/watch.lock" && echo $p; done | head -1)
[ -n "$w" ] && ok "a watcher process holds the sandbox's watch.lock" || not_ok "no watcher for $e"
[ -n "$w" ] && kill -KILL "$w"
for i in $(seq 60); do $KILN sandbox ls 2>/dev/null | grep -q "^$e .* expired " && break; sleep 0.2; done
expect_exit 0 "ls says the expired one's time is up" $KILN sandbox ls
expect_grep "...expired" "^$e .* expired " "$T_TMP/out"
expect_exit 0 "gc" $KILN sandbox gc
[ ! -d "$SB/$e" ] && ok "...removes the expired sandbox" || not_ok "...left $e"
[ -d "$SB/$a" ] && [ -d "$SB/$b" ] && ok "...and keeps the others" || not_ok "...removed a live one"

# A kill right after the create: the create's timeout watcher may start only
# then (it made watch.lock inside the directory being removed: "Directory not
# empty"); the watcher's lock is made before it is forked, and a late file is
# removed too.
fails=0
for i in 1 2 3 4 5 6; do
	id=$($KILN sandbox create --timeout 10m life:v1 2>>"$T_TMP/kill.err") || { fails=$((fails + 1)); continue; }
	$KILN sandbox kill "$id" 2>>"$T_TMP/kill.err" || fails=$((fails + 1))
	[ ! -e "$SB/$id" ] || fails=$((fails + 1))
done
expect_eq "create + kill at once, 6 times: every kill removes it all" "$fails $(cat "$T_TMP/kill.err")" "0 "

# --- kiln run ---------------------------------------------------------------
expect_exit 0 "kiln run -e -w" $KILN run -e A=run -w /tmp life:v1 -- sh -c 'echo $A $B $(pwd)'
expect_eq "...env over the template's, workdir" "$(cat "$T_TMP/out")" "run tmpl /tmp"
expect_exit 124 "kiln run --timeout 1s kills a longer command" $KILN run --timeout 1s life:v1 -- sleep 30
n=$(ls "$SB" | wc -l)
expect_eq "...and removes its sandbox (only a and b left)" "$n" "2"
