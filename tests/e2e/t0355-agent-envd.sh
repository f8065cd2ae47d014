#!/usr/bin/env bash
# t0355-agent-envd.sh — envd's plane (runtime/) on a real sandbox, through
# `kiln agent envd --sandbox ID`: Start with env layering, cwd in the user's
# home and the user's id, a non-zero exit, a deadline; a background process
# whose stream stays open while SendInput / List / CloseStdin reach it; a late
# Connect getting its kept exit; SendSignal; a PTY with a resize; MakeDir,
# Stat, ListDir, Move, Remove as that user (owner), WatchDir and the watcher
# trio; hostile bodies.  One template, one sandbox; the env the HTTP plane
# will pass (the template's, then create's) is given with -e.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
SB="$KILN_HOME/sandboxes"
printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$T_TMP/root/etc/passwd"
printf 'root:x:0:\nuser:x:1000:\n' >"$T_TMP/root/etc/group"
mkdir -p "$T_TMP/root/home/user" "$T_TMP/root/root"
chown 1000:1000 "$T_TMP/root/home/user"
chmod 700 "$T_TMP/root/root"
expect_exit 0 "rootfs" $KILN rootfs --from-dir "$T_TMP/root" -o "$T_TMP/envd.ext4" --free 16M
expect_exit 0 "template with env" $KILN snapshot -t envd:v1 -e A=tmpl -e B=tmpl "$T_TMP/envd.ext4"
cleanup() { cat "$T_TMP/envd.err" >&2; $KILN sandbox kill $(ls "$SB" 2>/dev/null) >/dev/null 2>&1; rm -rf "$T_TMP"; }
trap cleanup EXIT
expect_exit 0 "sandbox create" $KILN sandbox create --timeout 10m envd:v1
id=$(cat "$T_TMP/out")

b64() { printf '%s' "$1" | base64 -w0; }
# run the requests on stdin; output in $T_TMP/envd
envd() { $KILN agent envd --sandbox "$id" --user user -e A=tmpl -e B=tmpl -e B=create "$@" >"$T_TMP/envd" 2>"$T_TMP/envd.err"; }
# the decoded stdout/pty data of answer N
data_of() { grep "^$1 MSG " "$T_TMP/envd" | sed "s/^$1 MSG //" | jq -r '.event.data.stdout // .event.data.pty // empty' | base64 -d; }

envd <<REQ
/process.Process/Start {"process":{"cmd":"/bin/sh","args":["-l","-c","echo \$A \$B \$C \$USER \$(id -u) \$(pwd); echo oops >&2; exit 7"],"envs":{"C":"cmd"},"cwd":"sub"}}
/filesystem.Filesystem/MakeDir {"path":"sub"}
/process.Process/Start {"process":{"cmd":"/bin/sh","args":["-c","echo \$A \$B \$C \$USER \$(id -u) \$(pwd); echo oops >&2; exit 7"],"envs":{"C":"cmd"},"cwd":"sub"}}
/process.Process/Start timeout=500 {"process":{"cmd":"sleep","args":["30"]}}
REQ
expect_eq "envd ran" "$?" 0
expect_grep "a missing cwd is invalid_argument" '^1 END \{"error":\{"code":"invalid_argument"' "$T_TMP/envd"
expect_grep "MakeDir of a relative path makes it in the user's home, theirs" '^2 200 .*"path":"/home/user/sub".*"owner":"user"' "$T_TMP/envd"
expect_eq "env is the template's, then the sandbox's, then the command's; cwd in the home; the user's id" \
	"$(data_of 3)" "tmpl create cmd user 1000 /home/user/sub"
expect_grep "...stderr as its own data" '^3 MSG \{"event":\{"data":\{"stderr":"b29wcwo="' "$T_TMP/envd"
expect_grep "...the exit code in the end event" '^3 MSG .*"end":\{"exitCode":7,"exited":true,"status":"exit status 7"' "$T_TMP/envd"
expect_grep "...then the end-stream message" '^3 END \{\}$' "$T_TMP/envd"
expect_grep "the first message is start" '^3 MSG \{"event":\{"start":\{"pid":[0-9]+\}\}\}$' "$T_TMP/envd"
expect_grep "Connect-Timeout-Ms ends the process with deadline_exceeded" '^4 END \{"error":\{"code":"deadline_exceeded"' "$T_TMP/envd"

envd <<REQ
&/process.Process/Start {"process":{"cmd":"cat"},"tag":"bg","stdin":true}
sleep 500
/process.Process/List {}
/process.Process/SendInput {"process":{"tag":"bg"},"input":{"stdin":"$(b64 'to cat')"}}
sleep 300
/process.Process/CloseStdin {"process":{"tag":"bg"}}
wait
/process.Process/Connect {"process":{"tag":"bg"}}
&/process.Process/Start {"process":{"cmd":"sleep","args":["60"]},"tag":"s"}
sleep 500
/process.Process/SendSignal {"process":{"tag":"s"},"signal":"SIGNAL_SIGKILL"}
wait
/process.Process/SendSignal {"process":{"pid":99999},"signal":"SIGNAL_SIGKILL"}
&/process.Process/Start {"process":{"cmd":"/bin/sh"},"pty":{"size":{"cols":80,"rows":24}},"tag":"t"}
sleep 500
/process.Process/Update {"process":{"tag":"t"},"pty":{"size":{"cols":111,"rows":33}}}
/process.Process/SendInput {"process":{"tag":"t"},"input":{"pty":"$(b64 'stty size; exit 0
')"}}
wait
REQ
expect_grep "List shows the background process with its tag and cmd" '^2 200 \{"processes":\[.*"cmd":"cat".*"tag":"bg"' "$T_TMP/envd"
expect_grep "SendInput reaches it" '^3 200 \{\}$' "$T_TMP/envd"
expect_eq "...and its stream carried the output" "$(data_of 1)" "to cat"
expect_grep "CloseStdin ends cat" '^1 MSG .*"end":\{"exited":true' "$T_TMP/envd"
expect_grep "a late Connect gets the kept exit" '^5 MSG .*"end":\{"exited":true,"status":"exit status 0"' "$T_TMP/envd"
expect_grep "SendSignal SIGKILL" '^7 200 \{\}$' "$T_TMP/envd"
expect_grep "...the process ended by the signal" '^6 MSG .*"end":\{"exitCode":-1,"exited":false' "$T_TMP/envd"
expect_grep "an unknown pid is not_found (404)" '^8 404 \{"code":"not_found"' "$T_TMP/envd"
expect_grep "Update resizes the PTY" '^10 200 \{\}$' "$T_TMP/envd"
expect_grep "...the terminal saw the new size" '33 111' <(data_of 9)

envd <<REQ
/filesystem.Filesystem/MakeDir {"path":"/home/user/d/e"}
/filesystem.Filesystem/MakeDir {"path":"/home/user/d/e"}
/filesystem.Filesystem/MakeDir {"path":"/etc/nope"}
/filesystem.Filesystem/CreateWatcher {"path":"~/d","recursive":true}
/process.Process/Start {"process":{"cmd":"/bin/sh","args":["-c","echo x > d/e/f.txt"]}}
sleep 300
/filesystem.Filesystem/GetWatcherEvents {"watcherId":"w1"}
/filesystem.Filesystem/Stat {"path":"d/e/f.txt"}
/filesystem.Filesystem/ListDir {"path":"d","depth":2}
/filesystem.Filesystem/Move {"source":"d/e/f.txt","destination":"d/g/h.txt"}
/filesystem.Filesystem/Remove {"path":"d/g"}
/filesystem.Filesystem/Stat {"path":"d/g"}
/filesystem.Filesystem/RemoveWatcher {"watcherId":"w1"}
&/filesystem.Filesystem/WatchDir timeout=2000 {"path":"/home/user/d"}
sleep 700
/process.Process/Start {"process":{"cmd":"touch","args":["d/w"]}}
wait
/filesystem.Filesystem/Stat {"path":"/root/x"}
/filesystem.Filesystem/Stat {"path":
/process.Process/SendInput {"process":{"tag":"$(head -c 10000 /dev/zero | tr '\0' x)"},"input":{"stdin":""}}
REQ
expect_grep "MakeDir" '^1 200 \{"entry":\{"name":"e","type":"FILE_TYPE_DIRECTORY","path":"/home/user/d/e"' "$T_TMP/envd"
expect_grep "...again: already_exists (409)" '^2 409 \{"code":"already_exists"' "$T_TMP/envd"
expect_grep "...where the user may not: permission_denied" '^3 403 \{"code":"permission_denied"' "$T_TMP/envd"
expect_grep "CreateWatcher" '^4 200 \{"watcherId":"w1"\}$' "$T_TMP/envd"
expect_grep "GetWatcherEvents has the create in a subdirectory" '^6 200 \{"events":\[.*\{"name":"e/f.txt","type":"EVENT_TYPE_CREATE"\}' "$T_TMP/envd"
expect_grep "Stat: size as a string, mode, owner" '^7 200 .*"size":"2","mode":420,"permissions":"-rw-r--r--","owner":"user","group":"user"' "$T_TMP/envd"
expect_grep "ListDir to depth 2" '^8 200 .*"path":"/home/user/d/e/f.txt"' "$T_TMP/envd"
expect_grep "Move makes the destination's parent" '^9 200 \{"entry":\{"name":"h.txt".*"path":"/home/user/d/g/h.txt"' "$T_TMP/envd"
expect_grep "Remove" '^10 200 \{\}$' "$T_TMP/envd"
expect_grep "...then Stat is not_found" '^11 404 ' "$T_TMP/envd"
expect_grep "WatchDir: start first" '^13 MSG \{"start":\{\}\}$' "$T_TMP/envd"
expect_grep "...then the event" '^13 MSG \{"filesystem":\{"name":"w","type":"EVENT_TYPE_CREATE"\}\}$' "$T_TMP/envd"
expect_grep "...then deadline_exceeded" '^13 END \{"error":\{"code":"deadline_exceeded"' "$T_TMP/envd"
expect_grep "the user cannot stat root's files" '^15 403 ' "$T_TMP/envd"
expect_grep "bad JSON is invalid_argument" '^16 400 \{"code":"invalid_argument","message":"the request message is not JSON' "$T_TMP/envd"
expect_grep "a 10,000-character tag is refused" '^17 400 .*over the limit of 4096' "$T_TMP/envd"
expect_exit 0 "the sandbox still answers" $KILN sandbox exec "$id" -- true
