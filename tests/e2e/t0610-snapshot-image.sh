#!/usr/bin/env bash
# t0610-snapshot-image.sh — `kiln snapshot IMAGE` from the local store (built
# here with kiln build: scratch + busybox, ENV, WORKDIR, USER 1000): the
# template takes the image's name, user, workdir and env, and `kiln run`
# of a non-root template runs the command as that user (identity set by the agent).
. tests/e2e/lib.sh
. tests/e2e/vmlib.sh
vm_setup
C=$T_TMP/ctx
mkdir -p "$C/root/bin" "$C/root/www"
cp /bin/busybox "$C/root/bin/busybox"
for a in sh cat id pwd hostname date; do ln -sf busybox "$C/root/bin/$a"; done
echo "page from the image" >"$C/root/www/index.html"
cat >"$C/Dockerfile" <<'DF'
FROM scratch
COPY root/ /
ENV GREETING=from-image
WORKDIR /www
USER 1000
DF
expect_exit 0 "kiln build of a busybox image" $KILN build -t webimg:1 "$C"
expect_exit 1 "an unknown image is refused" $KILN snapshot nosuch:image
expect_grep "...naming it" "nosuch:image" "$T_TMP/err"
expect_exit 0 "kiln snapshot IMAGE" $KILN snapshot --start 'busybox httpd -p 127.0.0.1:8080 -h /www' \
	--ready 'busybox wget -q -O- http://127.0.0.1:8080/index.html' webimg:1
expect_exit 0 "the template is named after the image" $KILN snapshot ls
expect_grep "...webimg:1" "^webimg:1 " "$T_TMP/out"
expect_exit 0 "kiln run as the image's USER, WORKDIR and ENV" \
	$KILN run webimg:1 -- sh -c 'echo $GREETING $(pwd) $(id -u); busybox wget -q -O- http://127.0.0.1:8080/index.html; hostname'
expect_eq "...and its server answers" "$(head -2 "$T_TMP/out" | tr '\n' ' ')" "from-image /www 1000 page from the image "
expect_grep "...with a sandbox id as hostname" '^[0-9a-f]{12}$' "$T_TMP/out"
expect_exit 0 "the start command ran as the image's user" $KILN run webimg:1 -- sh -c 'busybox ps | busybox grep "[h]ttpd -p"'
expect_grep "...uid 1000" '^ *[0-9]+ +1000 .*httpd -p' "$T_TMP/out"
expect_eq "nothing left" "$(ls -A "$KILN_HOME/sandboxes" 2>/dev/null)" ""
