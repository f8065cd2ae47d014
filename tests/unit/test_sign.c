/* test_sign.c — sign/ without a registry: keys (generate, 0600, never
 * overwritten, sign/verify, a flipped byte or another key refused), the
 * payload's identity rules (exact tag, repository by digest, digest) and
 * the policy's scopes (most specific wins, a broken file refuses). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln.h"
#include "sign/sign.h"
#include "test.h"

static char dir[] = "/tmp/test_sign.XXXXXX";

static void test_keys(void)
{
	char *a = kiln_xasprintf("%s/a", dir), *b = kiln_xasprintf("%s/b", dir);
	char *akey = kiln_xasprintf("%s.key", a), *apub = kiln_xasprintf("%s.pub", a), *bpub = kiln_xasprintf("%s.pub", b);
	kiln_error *err = NULL;
	struct stat st;

	CHECK(sign_key_generate(a, NULL) == 0);
	CHECK(sign_key_generate(b, NULL) == 0);
	CHECK(stat(akey, &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK(sign_key_generate(a, &err) < 0);
	kiln_error_free(err);
	err = NULL;
	sign_key *ka = sign_key_load_private(akey, NULL), *pa = sign_key_load_public(apub, NULL);
	sign_key *pb = sign_key_load_public(bpub, NULL);
	CHECK(ka && pa && pb);
	CHECK(sign_key_load_private(apub, &err) == NULL);
	kiln_error_free(err);
	err = NULL;
	CHECK_STR(sign_key_id(ka), sign_key_id(pa));
	CHECK(strcmp(sign_key_id(pa), sign_key_id(pb)) != 0);
	char msg[] = "payload bytes";
	char *sig = sign_key_sign(ka, msg, strlen(msg), NULL);
	CHECK(sig != NULL);
	CHECK_INT(sign_key_verify(pa, msg, strlen(msg), sig, NULL), 1);
	CHECK_INT(sign_key_verify(pb, msg, strlen(msg), sig, NULL), 0);
	msg[0] ^= 1;
	CHECK_INT(sign_key_verify(pa, msg, strlen(msg), sig, NULL), 0);
	msg[0] ^= 1;
	sig[10] = 0; /* truncated */
	CHECK_INT(sign_key_verify(pa, msg, strlen(msg), sig, NULL), 0);
	CHECK_INT(sign_key_verify(pa, msg, strlen(msg), "not base64!", NULL), 0);
	CHECK(sign_key_sign(pa, msg, strlen(msg), &err) == NULL);
	kiln_error_free(err);
	err = NULL;
	free(sig);
	sign_key_free(ka);
	sign_key_free(pa);
	sign_key_free(pb);
	free(a), free(b), free(akey), free(apub), free(bpub);
}

static void test_payload(void)
{
	const char *d = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	const char *d2 = "sha256:1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char *ref = sign_docker_ref("h:5000", "team/app", "v1"), *p = sign_payload_make(ref, d);
	kiln_error *err = NULL;

	CHECK_STR(ref, "h:5000/team/app:v1");
	CHECK(strstr(p, "\"optional\":null") != NULL);
	CHECK_INT(sign_payload_check(p, strlen(p), "h:5000", "team/app", "v1", d, NULL), 0);
	CHECK_INT(sign_payload_check(p, strlen(p), "h:5000", "team/app", NULL, d, NULL), 0);
	CHECK_INT(sign_payload_check(p, strlen(p), "h:5000", "team/app", "v2", d, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "made for h:5000/team/app:v1, not h:5000/team/app:v2"));
	kiln_error_free(err);
	err = NULL;
	CHECK_INT(sign_payload_check(p, strlen(p), "h:5000", "team/app", "v1", d2, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "signs manifest sha256:0123"));
	kiln_error_free(err);
	err = NULL;
	CHECK_INT(sign_payload_check(p, strlen(p), "h:5001", "team/app", NULL, d, NULL), -1);
	CHECK_INT(sign_payload_check("{}", 2, "h:5000", "team/app", "v1", d, NULL), -1);
	char *hub = sign_docker_ref("registry-1.docker.io", "library/x", NULL);
	CHECK_STR(hub, "docker.io/library/x");
	char *t = sign_attach_tag(d, "sig");
	CHECK_STR(t, "sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.sig");
	free(t), free(hub), free(ref), free(p);
}

static void test_policy(void)
{
	char *path = kiln_xasprintf("%s/policy.json", dir);
	kiln_error *err = NULL;
	struct sign_rule r;
	FILE *f = fopen(path, "w");

	fprintf(f, "{\"default\": \"reject\", \"scopes\": {\"h:5000\": {\"keys\": [\"a.pub\"]},"
		   " \"h:5000/team\": {\"keys\": [\"a.pub\", \"%s/b.pub\"]}, \"h:5000/team/x\": {\"reject\": true},"
		   " \"h:5000/cs\": {\"keys\": [\"a.pub\"], \"identity\": \"repository\"}}}",
		dir);
	fclose(f);
	sign_policy *p = sign_policy_load(path, &err);
	CHECK(p != NULL);
	if (p) {
		sign_policy_rule(p, "h:5000", "team/app", &r);
		CHECK_STR(r.scope, "h:5000/team");
		CHECK_INT((int)r.nkeys, 2);
		CHECK(!r.match_repository);
		sign_policy_rule(p, "h:5000", "cs/app", &r);
		CHECK(r.match_repository);
		sign_policy_rule(p, "h:5000", "teamx/app", &r);
		CHECK_STR(r.scope, "h:5000");
		sign_policy_rule(p, "h:5000", "team/x", &r);
		CHECK(r.reject);
		sign_policy_rule(p, "other", "a", &r);
		CHECK(r.scope == NULL && r.reject && sign_rule_active(&r));
	}
	sign_policy_free(p);
	f = fopen(path, "w");
	fprintf(f, "{\"scopes\": {\"h\": {\"keys\": [\"missing.pub\"]}}}");
	fclose(f);
	err = NULL;
	CHECK(sign_policy_load(path, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "missing.pub"));
	kiln_error_free(err);
	f = fopen(path, "w");
	fprintf(f, "{\"scopes\": {\"h\": {\"keys\": [\"a.pub\"], \"identity\": \"tag\"}}}");
	fclose(f);
	err = NULL;
	CHECK(sign_policy_load(path, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "identity"));
	kiln_error_free(err);
	free(path);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	RUN(test_keys);
	RUN(test_payload);
	RUN(test_policy);
	char *cmd = kiln_xasprintf("rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "# could not remove %s\n", dir);
	free(cmd);
	return test_done();
}
