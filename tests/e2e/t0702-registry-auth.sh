#!/usr/bin/env bash
# t0702-registry-auth.sh — the auth matrix of `kiln serve` with "auth": true:
# anonymous, pull-only, push, another team's token, expired, revoked and
# garbled tokens, public repositories, the Bearer challenge + token endpoint,
# and skopeo login / copy with credentials.
. tests/e2e/lib.sh
. tests/e2e/registry-lib.sh

trap 'reg_stop; rm -rf "$T_TMP"' EXIT
D="$T_TMP/data"
echo '{"auth": true, "token_ttl_s": 600}' >"$T_TMP/auth.json"
tok() { "$KILN" token create --data "$D" "$@"; }
PUSH=$(tok --scope team-a:pull,push push-a)
PULL=$(tok --scope team-a:pull pull-a)
OTHER=$(tok --scope 'team-b:*' team-b)
ADMIN=$(tok --scope '*:*' admin)
EXPIRED=$(tok --scope team-a:pull --ttl 1 short)
REVOKED=$(tok --scope team-a:pull gone)
expect_exit 0 "kiln token revoke" "$KILN" token revoke --data "$D" gone
expect_exit 0 "kiln token ls" "$KILN" token ls --data "$D"
expect_grep "token ls shows scopes" '^push-a +team-a:pull,push' "$T_TMP/out"
if grep -rq "$PUSH" "$D" 2>/dev/null; then not_ok "secrets are not stored in clear"; else ok "secrets are not stored in clear"; fi
expect_exit 2 "a scope without actions is a usage error" "$KILN" token create --data "$D" --scope team-a bad
reg_start "$D" --config "$T_TMP/auth.json" || { not_ok "kiln serve starts"; exit 1; }
cd "$T_TMP"
sleep 1.1 # let the 1 s token expire

printf 'blob' >b; DB=$(sha256_of b)
B() { echo "Authorization: Bearer $1"; }

# ---- anonymous
req GET /v2/
expect_error "anonymous /v2/ is challenged" 401 UNAUTHORIZED
expect_grep "Bearer challenge with realm and service" '^WWW-Authenticate: Bearer realm="http://127\.0\.0\.1:[0-9]+/token",service="kiln"' hdr
req GET /v2/team-a/app/tags/list
expect_error "anonymous pull of a private repository" 401 UNAUTHORIZED
expect_grep "challenge names the scope" 'scope="repository:team-a/app:pull"' hdr
req POST "/v2/team-a/app/blobs/uploads/?digest=$DB" --data-binary @b
expect_error "anonymous push" 401 UNAUTHORIZED

# ---- push token
req GET /v2/ -H "$(B "$PUSH")"
expect_code "/v2/ with a token" 200
req POST "/v2/team-a/app/blobs/uploads/?digest=$DB" --data-binary @b -H "$(B "$PUSH")"
expect_code "push token pushes to its namespace" 201
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "$PUSH")"
expect_code "push token pulls" 200
req DELETE "/v2/team-a/app/blobs/$DB" -H "$(B "$PUSH")"
expect_error "push token may not delete" 403 DENIED
req POST "/v2/team-b/app/blobs/uploads/" -H "$(B "$PUSH")"
expect_error "push token outside its namespace" 403 DENIED
req POST "/v2/team-ab/app/blobs/uploads/" -H "$(B "$PUSH")"
expect_error "namespace prefix is not a match (team-ab vs team-a)" 403 DENIED

# ---- pull token
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "$PULL")"
expect_code "pull token pulls" 200
req POST "/v2/team-a/app/blobs/uploads/" -H "$(B "$PULL")"
expect_error "pull token may not push" 403 DENIED
req GET "/v2/team-a/app/blobs/$DB" -u "ci:$PULL"
expect_code "Basic auth with the secret" 200

# ---- other team, admin, bad credentials
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "$OTHER")"
expect_error "another team's token" 403 DENIED
req GET /v2/_catalog -H "$(B "$PULL")"
expect_error "catalog needs a * scope" 403 DENIED
req GET /v2/_catalog -H "$(B "$ADMIN")"
expect_code "admin lists the catalog" 200
req DELETE "/v2/team-a/app/blobs/$DB" -H "$(B "$ADMIN")"
expect_code "admin deletes" 202
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "$EXPIRED")"
expect_error "expired token" 401 UNAUTHORIZED
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "$REVOKED")"
expect_error "revoked token" 401 UNAUTHORIZED
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "kiln_deadbeef")"
expect_error "garbled token" 401 UNAUTHORIZED
req GET "/v2/team-a/app/blobs/$DB" -H "$(B "kt1.1.99999999999.0000")"
expect_error "forged issued token" 401 UNAUTHORIZED
req GET "/v2/team-a/app/blobs/$DB" -u "ci:wrong"
expect_error "wrong Basic password" 401 UNAUTHORIZED

# ---- token endpoint
req GET "/token?service=kiln&scope=repository:team-a/app:pull" -u "ci:$PULL"
expect_code "token endpoint with credentials" 200
T=$(jq -r .token body)
expect_grep "issued token format" '^kt1\.[0-9]+\.[0-9]+\.[0-9a-f]{64}$' <(echo "$T")
req GET "/v2/team-a/app/tags/list" -H "$(B "$T")"
expect_code "issued token is accepted" 200
req GET "/v2/team-b/x/tags/list" -H "$(B "$T")"
expect_error "issued token carries the stored scopes" 403 DENIED
BAD=$(echo "$T" | sed 's/\.\([0-9]*\)\./.9\1./')
req GET "/v2/team-a/app/tags/list" -H "$(B "$BAD")"
expect_error "tampered issued token" 401 UNAUTHORIZED
req GET "/token?service=kiln" -u "ci:wrong"
expect_error "token endpoint refuses bad credentials" 401 UNAUTHORIZED
req GET "/token?service=kiln&scope=repository:pub/app:pull"
expect_code "anonymous token" 200
ANON=$(jq -r .token body)

# ---- public repositories: anonymous pull only
req POST "/v2/pub/app/blobs/uploads/?digest=$DB" --data-binary @b -H "$(B "$ADMIN")"
expect_exit 0 "kiln registry public" "$KILN" registry public --data "$D" pub/app
req GET "/v2/pub/app/blobs/$DB"
expect_code "anonymous pull of a public repository" 200
req GET "/v2/pub/app/blobs/$DB" -H "$(B "$ANON")"
expect_code "anonymous token pulls a public repository" 200
req POST "/v2/pub/app/blobs/uploads/"
expect_error "anonymous push to a public repository" 401 UNAUTHORIZED
req POST "/v2/pub/app/blobs/uploads/" -H "$(B "$PULL")"
expect_error "a token without push on a public repository" 403 DENIED

# ---- real client: skopeo login and copy
umoci init --layout img >/dev/null && umoci new --image img:v1 >/dev/null
echo data >f && umoci insert --image img:v1 f /f >/dev/null
export REGISTRY_AUTH_FILE="$T_TMP/auth-file.json"
expect_exit 1 "skopeo push without credentials fails" skopeo copy --dest-tls-verify=false oci:img:v1 "docker://$REG/team-a/img:v1"
expect_exit 1 "skopeo login with a bad secret fails" skopeo login --tls-verify=false -u ci -p wrong "$REG"
expect_exit 0 "skopeo login" skopeo login --tls-verify=false -u ci -p "$PUSH" "$REG"
expect_exit 0 "skopeo push with the login" skopeo copy --dest-tls-verify=false oci:img:v1 "docker://$REG/team-a/img:v1"
expect_exit 0 "skopeo pull with the login" skopeo copy --src-tls-verify=false "docker://$REG/team-a/img:v1" oci:pulled:v1
expect_exit 1 "skopeo push to another team fails" skopeo copy --dest-tls-verify=false oci:img:v1 "docker://$REG/team-b/img:v1"
