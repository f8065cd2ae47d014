#!/usr/bin/env bash
# t0540-build-secrets.sh — build secrets and ssh-agent forwarding, as BuildKit
# has them: kiln build --secret (file, env, type=) with RUN
# --mount=type=secret (default target, a target in a directory the base
# lacks, env=, mode/uid/gid, required, optional), --ssh with
# RUN --mount=type=ssh reaching a real ssh-agent on the host; the secret's
# bytes are in no layer, cache entry, store file, --json log, image config,
# builder VM snapshot or template.  Real QEMU (TCG), real agent.
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup

AGENT_PID=
trap '[ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null; rm -rf "$T_TMP"' EXIT

export SOURCE_DATE_EPOCH=1700000000
B=$T_TMP/bb
umoci init --layout "$B" >/dev/null 2>&1
umoci new --image "$B:base" >/dev/null 2>&1
umoci unpack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1
R=$T_TMP/bbb/rootfs
mkdir -p "$R/bin" "$R/etc" "$R/tmp" "$R/proc" "$R/sys" "$R/dev" "$R/run" "$R/home/app"
chmod 1777 "$R/tmp"
cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$R/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' >"$R/etc/passwd"
printf 'root:x:0:\napp:x:1000:\n' >"$R/etc/group"
# busybox has no unix-socket client: a static one that asks $SSH_AUTH_SOCK
# for its identities (SSH2_AGENTC_REQUEST_IDENTITIES) and prints their comments
cat >"$T_TMP/agentls.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
static unsigned char b[65536];
static unsigned be(const unsigned char *p) { return (unsigned)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
int main(void)
{
	const char *p = getenv("SSH_AUTH_SOCK");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	unsigned char req[5] = { 0, 0, 0, 1, 11 };
	size_t got = 0, len;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (!p || strlen(p) >= sizeof(sa.sun_path)) return 2;
	strcpy(sa.sun_path, p);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || write(fd, req, 5) != 5) { perror(p); return 3; }
	while (got < 4 || got < 4 + be(b)) { ssize_t n = read(fd, b + got, sizeof(b) - got); if (n <= 0) return 4; got += (size_t)n; }
	if (b[4] != 12) return 5;
	unsigned n = be(b + 5), off = 9;
	printf("%u\n", n);
	for (unsigned i = 0; i < n; i++) {
		len = be(b + off); off += 4 + (unsigned)len;
		len = be(b + off); printf("%.*s\n", (int)len, (char *)b + off + 4); off += 4 + (unsigned)len;
	}
	return 0;
}
C
gcc -static -Os -o "$R/bin/agentls" "$T_TMP/agentls.c"
umoci repack --image "$B:base" "$T_TMP/bbb" >/dev/null 2>&1

SECRET="kiln-secret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
ENVSECRET="kiln-envsecret-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s' "$SECRET" >"$T_TMP/secret.txt"
sum_of() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
C=$T_TMP/ctx
mkdir -p "$C"
CA=/etc/ssl/certs/ca-certificates.crt
[ -f "$CA" ] || { printf 'not a real CA bundle\n' >"$T_TMP/ca.crt"; CA=$T_TMP/ca.crt; }
cat >"$C/Dockerfile" <<DF
FROM oci:$B:base
RUN --mount=type=secret,id=tok sha256sum /run/secrets/tok | cut -d' ' -f1 >/sum && stat -c '%a %u %g' /run/secrets/tok >/st
RUN --mount=type=secret,id=ca,target=$CA sha256sum $CA | cut -d' ' -f1 >/casum
RUN --mount=type=secret,id=tok,env=TOK,mode=0440,uid=1000,gid=1000,target=/home/app/t printf %s "\$TOK" | sha256sum | cut -d' ' -f1 >/envsum && stat -c '%a %u %g' /home/app/t >/st2
RUN --mount=type=secret,id=fromenv,env=FE printf %s "\$FE" | sha256sum | cut -d' ' -f1 >/fesum && ls /run/secrets 2>/dev/null | wc -l >/fe-files
RUN --mount=type=secret,id=absent [ ! -e /run/secrets/absent ] && echo absent >/absent
DF
export KILN_TEST_FE=$ENVSECRET
expect_exit 0 "build with secrets" "$KILN" build --json -t sec:1 --oci-out "$T_TMP/oci" \
	--secret id=tok,src="$T_TMP/secret.txt" --secret id=ca,src="$CA" --secret id=fromenv,env=KILN_TEST_FE "$C"
cp "$T_TMP/out" "$T_TMP/build.json"
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci:1" "$T_TMP/u"
U=$T_TMP/u/rootfs
expect_eq "the secret at /run/secrets/ID" "$(cat "$U/sum")" "$(sum_of "$SECRET")"
expect_eq "mode 0400, root's, by default" "$(cat "$U/st")" "400 0 0"
expect_eq "the host CA bundle at its path, in a directory the base lacks" "$(cat "$U/casum")" \
	"$(sha256sum "$CA" | cut -d' ' -f1)"
expect_eq "env= gives the variable; mode, uid, gid, target" "$(cat "$U/envsum") $(cat "$U/st2")" \
	"$(sum_of "$SECRET") 440 1000 1000"
expect_eq "--secret env=VAR; env= alone mounts no file" "$(cat "$U/fesum") $(cat "$U/fe-files")" "$(sum_of "$ENVSECRET") 0"
expect_eq "an optional secret not given: nothing mounted" "$(cat "$U/absent")" absent
expect_eq "no mount point left in the image" "$(ls -d "$U/run/secrets" "$U/etc/ssl" "$U/home/app/t" 2>/dev/null | wc -l)" 0
leaks() { # DIR SECRET...: files under DIR holding any SECRET (gzip ones read through), one pass
	local d=$1 s pats=()
	shift
	for s in "$@"; do pats+=(-e "$s"); done
	find "$d" -type f -size +0 2>/dev/null | while read -r f; do
		if [ "$(head -c 2 "$f" | od -An -tx1 | tr -d ' ')" = 1f8b ]; then
			zcat "$f" 2>/dev/null | grep -aqF "${pats[@]}" && echo "$f"
		elif grep -aqF "${pats[@]}" "$f"; then echo "$f"; fi
	done
}
expect_eq "no layer, config or manifest holds the secret" "$(leaks "$T_TMP/oci" "$SECRET" "$ENVSECRET")" ""
expect_eq "no store file, cache entry or builder VM snapshot holds them" \
	"$(leaks "$KILN_HOME" "$SECRET" "$ENVSECRET")" ""
expect_eq "the --json log does not hold them" "$(grep -c -e "$SECRET" -e "$ENVSECRET" "$T_TMP/build.json")" 0
cfg=$(python3 - "$T_TMP/oci" <<'PY'
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/blobs/sha256/" + json.load(open(d + "/index.json"))["manifests"][0]["digest"][7:]))
c = json.load(open(d + "/blobs/sha256/" + m["config"]["digest"][7:]))
print(len(c["history"]), " ".join(e for e in c["config"].get("Env", []) if e.startswith(("TOK", "FE"))))
PY
)
expect_eq "the image config: history of the steps, no secret variable" "$cfg" "6 "

# BuildKit keeps secrets out of the cache key: a new value is a cache hit
printf 'other' >"$T_TMP/secret2.txt"
expect_exit 0 "rebuild with another secret value" "$KILN" build --json \
	--secret id=tok,src="$T_TMP/secret2.txt" --secret id=ca,src="$CA" --secret id=fromenv,env=KILN_TEST_FE "$C"
expect_eq "every step a cache hit" "$(grep -c '"cache":"hit"' "$T_TMP/out")" 5

# refused clearly
printf 'FROM oci:%s:base\nRUN --mount=type=secret,id=nope,required true\n' "$B" >"$T_TMP/Dockerfile.req"
expect_exit 1 "a required secret not given" "$KILN" build -f "$T_TMP/Dockerfile.req" "$C"
expect_grep "error names the step and the secret" 'Dockerfile.req:2: \[2/2\] RUN .*secret nope: not found' "$T_TMP/err"
expect_exit 2 "--secret without an id" "$KILN" build --secret src=/etc/hostname "$C"
expect_grep "usage error" 'secret missing ID' "$T_TMP/err"
expect_exit 1 "--secret src= of a missing file" "$KILN" build --no-cache -f "$T_TMP/Dockerfile.req" \
	--secret id=nope,src="$T_TMP/no-such" "$C"
expect_grep "the file is named" "secret nope.*no-such" "$T_TMP/err"

# --ssh: a real ssh-agent with a generated key, reached from the RUN
ssh-keygen -q -t ed25519 -N '' -C kiln-t0540-key -f "$T_TMP/id" >/dev/null
eval "$(ssh-agent -s -a "$T_TMP/agent.sock")" >/dev/null
AGENT_PID=$SSH_AGENT_PID
added=no
for _ in $(seq 1 50); do ssh-add -q "$T_TMP/id" 2>/dev/null && added=yes && break; sleep 0.1; done
expect_eq "the key is in the host's ssh-agent" "$added" yes
cat >"$C/Dockerfile.ssh" <<DF
FROM oci:$B:base
RUN --mount=type=ssh agentls >/ids && echo "\$SSH_AUTH_SOCK" >/sock
RUN --mount=type=ssh,id=work,target=/tmp/a.sock,uid=1000,mode=0600,required SSH_AUTH_SOCK=/tmp/a.sock agentls >/ids2 && stat -c '%a %u' /tmp/a.sock >/st
DF
expect_exit 0 "build with --ssh default and --ssh ID=SOCKET" "$KILN" build --json --oci-out "$T_TMP/oci-ssh" \
	-f "$C/Dockerfile.ssh" --ssh default --ssh work="$T_TMP/agent.sock" "$C"
expect_exit 0 "umoci unpacks it" umoci unpack --image "$T_TMP/oci-ssh:latest" "$T_TMP/us"
expect_eq "the RUN lists the host agent's key" "$(cat "$T_TMP/us/rootfs/ids")" "1
kiln-t0540-key"
expect_eq "SSH_AUTH_SOCK is BuildKit's default target" "$(cat "$T_TMP/us/rootfs/sock")" /run/buildkit/ssh_agent.0
expect_eq "an id, a target, its owner and mode" "$(cat "$T_TMP/us/rootfs/ids2" "$T_TMP/us/rootfs/st")" "1
kiln-t0540-key
600 1000"
expect_eq "no socket or mount point in the image" "$(ls -d "$T_TMP/us/rootfs/run/buildkit" "$T_TMP/us/rootfs/tmp/a.sock" 2>/dev/null | wc -l)" 0
printf 'FROM oci:%s:base\nRUN --mount=type=ssh,id=other,required true\n' "$B" >"$T_TMP/Dockerfile.sshreq"
expect_exit 1 "a required ssh id not given" "$KILN" build -f "$T_TMP/Dockerfile.sshreq" --ssh default "$C"
expect_grep "error names the id" 'no SSH key other forwarded' "$T_TMP/err"
expect_exit 2 "--ssh of a missing socket" "$KILN" build --ssh default="$T_TMP/none.sock" "$C"
expect_grep "usage error names it" 'none.sock is not an ssh-agent socket' "$T_TMP/err"
kill "$AGENT_PID" 2>/dev/null
AGENT_PID=

# the builder VM snapshot of the base: never saved by a VM that will hold
# secrets (its RAM is a file while it runs), but by the next plain stage
expect_eq "stages with secrets or ssh saved no builder VM snapshot of the base" \
	"$(ls -d "$KILN_HOME"/builder-vm/*/base-*/ok 2>/dev/null | wc -l)" 0
printf 'FROM oci:%s:base\nRUN echo plain >/plain\n' "$B" >"$T_TMP/Dockerfile.plain"
expect_exit 0 "a plain build on the base" "$KILN" build -f "$T_TMP/Dockerfile.plain" "$C"
expect_eq "... saves it" "$(ls -d "$KILN_HOME"/builder-vm/*/base-*/ok 2>/dev/null | wc -l)" 1

# the template of an image built with a secret: its files and memory image clean
printf 'FROM oci:%s:base\nRUN --mount=type=secret,id=tok sha256sum /run/secrets/tok >/sum2\nCMD ["sleep", "1000"]\n' "$B" >"$T_TMP/Dockerfile.tpl"
expect_exit 0 "build --template with a secret" "$KILN" build --json -f "$T_TMP/Dockerfile.tpl" -t sectpl:1 --memory 256 \
	--secret id=tok,src="$T_TMP/secret.txt" "$C"
expect_eq "its builder VM came from the base's snapshot" "$(grep -c '"base_restored":true' "$T_TMP/out")" 1
expect_eq "no file in \$KILN_HOME holds the secret: templates, snapshots, caches" "$(leaks "$KILN_HOME" "$SECRET")" ""
expect_eq "no VM left behind" "$(ls -A "$TMPDIR" | grep -c kiln-vm)" 0

# the checks above can fail: a RUN that copies the secret into its layer is found
printf 'FROM oci:%s:base\nRUN --mount=type=secret,id=tok cp /run/secrets/tok /leaked\n' "$B" >"$T_TMP/Dockerfile.leak"
expect_exit 0 "control: a build that leaks the secret into a layer" "$KILN" build -f "$T_TMP/Dockerfile.leak" \
	--oci-out "$T_TMP/oci-leak" --secret id=tok,src="$T_TMP/secret.txt" "$C"
expect_eq "control: the leak is found in the layer" "$(leaks "$T_TMP/oci-leak" "$SECRET" | wc -l)" 1
rm -rf "$T_TMP/oci-leak"
