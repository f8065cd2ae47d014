/* test_regclient.c — the registry client against a real kiln server
 * in-process on 127.0.0.1 (open and token-protected): references, the
 * WWW-Authenticate parser, credentials files, blob push (monolithic,
 * chunked, mount) and pull (resume, digest mismatch), manifests and indexes,
 * parallel transfers with progress and have(). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/registry.h"
#include "regclient/internal.h"
#include "test.h"

static char *tmp;
static char host[64], ahost[64];
static char *secret;

static void test_refs(void)
{
	static const struct {
		const char *in, *host, *repo, *tag, *digest;
	} ok[] = {
		{ "busybox", "registry-1.docker.io", "library/busybox", "latest", NULL },
		{ "docker.io/busybox:1.36", "registry-1.docker.io", "library/busybox", "1.36", NULL },
		{ "user/app", "registry-1.docker.io", "user/app", "latest", NULL },
		{ "127.0.0.1:5000/team/app:v1", "127.0.0.1:5000", "team/app", "v1", NULL },
		{ "localhost/app", "localhost", "app", "latest", NULL },
		{ "ghcr.io/o/r@sha256:" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "ghcr.io",
		  "o/r", NULL, "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" },
		{ "[::1]:5000/x:y", "[::1]:5000", "x", "y", NULL },
	};
	static const char *const bad[] = { "", "Busybox", "host:5000/", "a b", "x:bad tag", "x@sha256:12",
					   "host:99999/a", "h/a:-t", "a//b" };
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct oci_imgref r;
		kiln_error *err = NULL;
		CHECK(oci_imgref_parse(ok[i].in, &r, &err) == 0);
		if (err) {
			printf("#   %s: %s\n", ok[i].in, kiln_error_message(err));
			kiln_error_free(err);
			continue;
		}
		CHECK_STR(r.host, ok[i].host);
		CHECK_STR(r.repo, ok[i].repo);
		if (ok[i].tag)
			CHECK_STR(r.tag, ok[i].tag);
		else
			CHECK(r.tag == NULL);
		if (ok[i].digest)
			CHECK_STR(r.digest, ok[i].digest);
		oci_imgref_free(&r);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct oci_imgref r;
		kiln_error *err = NULL;
		CHECK(oci_imgref_parse(bad[i], &r, &err) < 0);
		CHECK(err && strstr(kiln_error_message(err), "reference"));
		kiln_error_free(err);
	}
	CHECK(kiln_ref_has_host("127.0.0.1:5000/a") && kiln_ref_has_host("ghcr.io/a"));
	CHECK(!kiln_ref_has_host("busybox") && !kiln_ref_has_host("team/app"));
	CHECK(oci_host_insecure("127.0.0.1:5000") && oci_host_insecure("[::1]:80") && oci_host_insecure("localhost"));
	CHECK(!oci_host_insecure("ghcr.io"));
	setenv("KILN_INSECURE_REGISTRIES", "reg.lan:5000, other.lan", 1);
	CHECK(oci_host_insecure("reg.lan:5000") && oci_host_insecure("other.lan:443"));
	CHECK(!oci_host_insecure("reg.lan:5001"));
	unsetenv("KILN_INSECURE_REGISTRIES");
}

static void test_challenge(void)
{
	struct rc_challenge ch;
	kiln_error *err = NULL;

	CHECK(rc_challenge_parse("Bearer realm=\"https://auth.io/token\",service=\"reg.io\","
				  "scope=\"repository:a/b:pull,push\"",
				  &ch, &err) == 0);
	CHECK_STR(ch.scheme, "Bearer");
	CHECK_STR(ch.realm, "https://auth.io/token");
	CHECK_STR(ch.service, "reg.io");
	CHECK_STR(ch.scope, "repository:a/b:pull,push");
	rc_challenge_free(&ch);
	CHECK(rc_challenge_parse("bearer  realm = \"x\\\"y\" , Service=svc, Basic realm=\"b\"", &ch, &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	CHECK_STR(ch.realm, "x\"y");
	CHECK_STR(ch.service, "svc");
	rc_challenge_free(&ch);
	CHECK(rc_challenge_parse("Basic realm=\"Registry Realm\"", &ch, &err) == 0);
	CHECK_STR(ch.scheme, "Basic");
	rc_challenge_free(&ch);
	CHECK(rc_challenge_parse("Bearer realm=\"unterminated", &ch, &err) < 0);
	kiln_error_clear(&err);
	CHECK(rc_challenge_parse("", &ch, &err) < 0);
	kiln_error_clear(&err);
}

static void test_credentials(void)
{
	kiln_error *err = NULL;
	char *u = NULL, *p = NULL, *path;
	struct stat st;

	CHECK(rc_auth_lookup("nowhere.io", &u, &p, &err) == 0);
	CHECK(rc_auth_store("reg.io:5000", "ci", "pa:ss", &err) == 0);
	path = rc_auth_path();
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	free(path);
	CHECK(rc_auth_lookup("reg.io:5000", &u, &p, &err) == 1);
	CHECK_STR(u, "ci");
	CHECK_STR(p, "pa:ss");
	free(u);
	free(p);
	/* ADD <url>'s client: a web server gets no registry credentials, and
	 * userinfo in the URL stays out of the client's name (its errors) */
	char *ca_was = getenv("KILN_REGISTRY_CA_FILE") ? kiln_xstrdup(getenv("KILN_REGISTRY_CA_FILE")) : NULL;
	setenv("KILN_REGISTRY_CA_FILE", "/nonexistent/ca.pem", 1);
	rc_client *w = rc_client_for_url("http://me:pw@reg.io:5000/f?x=1", 0, &err);
	CHECK(w && !w->user && w->plain && !w->ca_file);
	if (ca_was)
		setenv("KILN_REGISTRY_CA_FILE", ca_was, 1);
	else
		unsetenv("KILN_REGISTRY_CA_FILE");
	free(ca_was);
	if (w) {
		CHECK_STR(w->host, "reg.io:5000");
		CHECK_STR(w->base, "http://reg.io:5000");
	}
	rc_client_free(w);
	w = rc_client_for_url("https://[::1]:8443/a", 0, &err);
	CHECK(w && strcmp(w->host, "[::1]:8443") == 0 && strcmp(w->base, "https://[::1]:8443") == 0);
	rc_client_free(w);
	CHECK(rc_client_for_url("ftp://reg.io/x", 0, &err) == NULL && strstr(kiln_error_message(err), "http://"));
	kiln_error_clear(&err);
	CHECK(rc_client_for_url("not a url", 0, &err) == NULL);
	kiln_error_clear(&err);
	CHECK(rc_auth_store("bad", "a:b", "x", &err) < 0);
	kiln_error_clear(&err);
	/* docker's file as a fallback, Docker Hub under its legacy key */
	char *dh = kiln_xasprintf("%s/dhome/.docker", tmp), *cfg = kiln_xasprintf("%s/config.json", dh);
	const char *doc = "{\"auths\":{\"https://index.docker.io/v1/\":{\"auth\":\"aHViOnNlY3JldA==\"}}}";
	CHECK(kiln_mkdir_p(dh, 0755, &err) == 0);
	CHECK(kiln_write_atomic(cfg, doc, strlen(doc), 0600, &err) == 0);
	char *home = getenv("HOME") ? kiln_xstrdup(getenv("HOME")) : NULL, *hh = kiln_xasprintf("%s/dhome", tmp);
	setenv("HOME", hh, 1);
	CHECK(rc_auth_lookup("registry-1.docker.io", &u, &p, &err) == 1);
	CHECK_STR(u, "hub");
	CHECK_STR(p, "secret");
	free(u);
	free(p);
	if (home)
		setenv("HOME", home, 1);
	free(home);
	free(hh);
	free(dh);
	free(cfg);
	/* credential helpers: credHelpers for a host, credsStore for the rest */
	char *bin = kiln_xasprintf("%s/bin", tmp), *helper = kiln_xasprintf("%s/docker-credential-kilntest", bin);
	const char *script = "#!/bin/sh\n[ \"$1\" = get ] || exit 2\nread -r host\n"
			     "case \"$host\" in helped.io:5000|https://index.docker.io/v1/) "
			     "printf '{\"ServerURL\":\"%s\",\"Username\":\"hu\",\"Secret\":\"hs\"}' \"$host\";;\n"
			     "*) echo 'credentials not found' >&2; exit 1;; esac\n";
	const char *hdoc = "{\"credHelpers\":{\"helped.io:5000\":\"kilntest\"},\"credsStore\":\"kilntest\","
			   "\"auths\":{\"plain.io\":{\"auth\":\"cDpx\"}}}";
	char *path0 = getenv("PATH") ? kiln_xstrdup(getenv("PATH")) : kiln_xstrdup("/usr/bin:/bin");
	char *path1 = kiln_xasprintf("%s:%s", bin, path0);
	CHECK(kiln_mkdir_p(bin, 0755, &err) == 0);
	CHECK(kiln_write_atomic(helper, script, strlen(script), 0755, &err) == 0);
	char *hf = kiln_xasprintf("%s/helped.json", tmp);
	CHECK(kiln_write_atomic(hf, hdoc, strlen(hdoc), 0600, &err) == 0);
	setenv("PATH", path1, 1);
	setenv("REGISTRY_AUTH_FILE", hf, 1);
	CHECK(rc_auth_lookup("helped.io:5000", &u, &p, &err) == 1);
	CHECK_STR(u, "hu");
	CHECK_STR(p, "hs");
	free(u);
	free(p);
	CHECK(rc_auth_lookup("docker.io", &u, &p, &err) == 1); /* credsStore, asked with docker's key */
	CHECK_STR(u, "hu");
	free(u);
	free(p);
	CHECK(rc_auth_lookup("plain.io", &u, &p, &err) == 1); /* the store has none: auths */
	CHECK_STR(u, "p");
	CHECK_STR(p, "q");
	free(u);
	free(p);
	CHECK(rc_auth_lookup("none.io", &u, &p, &err) == 0);
	setenv("PATH", path0, 1);
	CHECK(rc_auth_lookup("helped.io:5000", &u, &p, &err) == 0); /* helper missing: a warning, no credentials */
	unsetenv("REGISTRY_AUTH_FILE");
	free(bin);
	free(helper);
	free(hf);
	free(path0);
	free(path1);
	CHECK(rc_auth_remove("reg.io:5000", &err) == 0);
	CHECK(rc_auth_lookup("reg.io:5000", &u, &p, &err) == 0);
	CHECK(rc_auth_remove("reg.io:5000", &err) < 0 && err->kind == KILN_E_NOTFOUND);
	kiln_error_clear(&err);
}

static char *write_file(const char *name, const void *data, size_t len)
{
	kiln_error *err = NULL;
	char *p = kiln_path_join(tmp, name);
	unlink(p);
	if (kiln_write_atomic(p, data, len, 0644, &err) < 0)
		kiln_error_free(err);
	return p;
}

static void fill(char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (char)((i * 2654435761u + seed) >> 13);
}

static void test_blobs(void)
{
	kiln_error *err = NULL;
	rc_client *c = rc_client_new(host, NULL, &err);
	size_t big = 300 * 1024;
	char *data = kiln_xmalloc(big), *back = NULL;
	size_t len = 0;
	struct rc_blob b = { .size = -1 };
	int64_t size = 0;

	fill(data, big, 1);
	kiln_digest_buf(KILN_SHA256, data, big, b.digest);
	b.data = data;
	b.len = big;
	CHECK(rc_blob_exists(c, "t/a", b.digest, NULL, &err) == 0);
	CHECK(rc_blob_push(c, "t/a", &b, &err) == 0);
	CHECK(rc_blob_exists(c, "t/a", b.digest, &size, &err) == 1);
	CHECK_INT(size, big);
	CHECK(rc_blob_get_mem(c, "t/a", b.digest, big, &back, &len, &err) == 0);
	CHECK(len == big && back && memcmp(back, data, big) == 0);
	free(back);
	/* a chunked upload of a file (PATCH with Content-Range) */
	fill(data, big, 2);
	char *src = write_file("src", data, big);
	struct rc_blob f = { .path = src };
	kiln_digest_buf(KILN_SHA256, data, big, f.digest);
	struct rc_xfer_opts o = { .chunk_size = 64 * 1024, .parallel = 1 };
	CHECK(rc_blobs_push(c, "t/a", &f, 1, &o, &err) == 0);
	CHECK(rc_blob_exists(c, "t/a", f.digest, &size, &err) == 1 && size == (int64_t)big);
	/* mount into another repository */
	struct rc_blob m = f;
	m.mount_from = "t/a";
	CHECK(rc_blob_push(c, "t/b", &m, &err) == 0);
	CHECK(rc_blob_exists(c, "t/b", f.digest, NULL, &err) == 1);
	/* pull with resume: a correct prefix already in the .part */
	char *dst = kiln_path_join(tmp, "dst"), *part = kiln_xasprintf("%s.part", dst), *got = NULL;
	unlink(dst);
	free(write_file("dst.part", data, 1000));
	struct rc_blob g = { .path = dst, .size = (int64_t)big };
	memcpy(g.digest, f.digest, KILN_DIGEST_MAX);
	uint64_t down0 = rc_client_stats(c)->bytes_down;
	CHECK(rc_blob_get(c, "t/b", &g, &err) == 0);
	CHECK_INT(rc_client_stats(c)->bytes_down - down0, big - 1000);
	CHECK(kiln_read_file(dst, &got, &len, 0, &err) == 0 && len == big && memcmp(got, data, big) == 0);
	free(got);
	CHECK(access(part, F_OK) != 0);
	/* a .part with a wrong prefix: the digest check refuses it, nothing stored */
	unlink(dst);
	free(write_file("dst.part", "garbage!", 8));
	CHECK(rc_blob_get(c, "t/b", &g, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "does not match its digest"));
	kiln_error_clear(&err);
	CHECK(access(dst, F_OK) != 0 && access(part, F_OK) != 0);
	CHECK(rc_blob_get(c, "t/b", &g, &err) == 0); /* and a clean retry works */
	/* no_fsync skips only the fsyncs: the digest is still checked before the rename */
	struct rc_xfer_opts nf = { .parallel = 1, .no_fsync = 1 };
	unlink(dst);
	free(write_file("dst.part", "garbage!", 8));
	CHECK(rc_blobs_pull(c, "t/b", &g, 1, &nf, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "does not match its digest"));
	kiln_error_clear(&err);
	CHECK(access(dst, F_OK) != 0 && access(part, F_OK) != 0);
	CHECK(rc_blobs_pull(c, "t/b", &g, 1, &nf, &err) == 0);
	CHECK(kiln_read_file(dst, &got, &len, 0, &err) == 0 && len == big && memcmp(got, data, big) == 0);
	free(got);
	CHECK(access(part, F_OK) != 0);
	/* a missing blob */
	struct rc_blob miss = { .path = dst, .size = -1 };
	kiln_digest_buf(KILN_SHA256, "nope", 4, miss.digest);
	CHECK(rc_blob_get(c, "t/b", &miss, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "404"));
	kiln_error_clear(&err);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	free(src);
	free(dst);
	free(part);
	free(data);
	rc_client_free(c);
}

static int have_even(void *ud, const char *digest)
{
	(void)ud;
	return (kiln_digest_hex(digest)[0] - '0') % 2 == 0;
}

static void on_progress(void *ud, const struct rc_progress *p)
{
	struct rc_progress *last = ud;
	CHECK(p->bytes_done <= p->bytes_total);
	*last = *p;
	last->digest = NULL;
}

static void test_parallel_and_manifests(void)
{
	kiln_error *err = NULL;
	rc_client *c = rc_client_new(host, NULL, &err);
	enum { N = 12 };
	struct rc_blob b[N], g[N];
	char *bufs[N], *paths[N];
	struct rc_progress last = { 0 };
	struct rc_xfer_opts o = { .parallel = 4, .progress = on_progress, .ud = &last };

	for (int i = 0; i < N; i++) {
		size_t n = 10000 + (size_t)i * 7000;
		bufs[i] = kiln_xmalloc(n);
		fill(bufs[i], n, 100 + (unsigned)i);
		memset(&b[i], 0, sizeof(b[i]));
		kiln_digest_buf(KILN_SHA256, bufs[i], n, b[i].digest);
		b[i].data = bufs[i];
		b[i].len = n;
		g[i] = (struct rc_blob){ .size = (int64_t)n };
		memcpy(g[i].digest, b[i].digest, KILN_DIGEST_MAX);
		paths[i] = kiln_xasprintf("%s/p%d", tmp, i);
		g[i].path = paths[i];
	}
	CHECK(rc_blobs_push(c, "t/par", b, N, &o, &err) == 0);
	CHECK_INT(last.blobs_done, N);
	CHECK_INT(last.blobs_skipped, 0);
	CHECK(last.bytes_done == last.bytes_total && last.bytes_total > 0);
	CHECK(rc_blobs_push(c, "t/par", b, N, &o, &err) == 0);
	CHECK_INT(last.blobs_skipped, N); /* all there already */
	CHECK_INT(last.bytes_moved, 0);
	o.have = have_even;
	CHECK(rc_blobs_pull(c, "t/par", g, N, &o, &err) == 0);
	size_t skipped = 0;
	for (int i = 0; i < N; i++) {
		int even = have_even(NULL, g[i].digest);
		skipped += (size_t)even;
		CHECK(even ? access(paths[i], F_OK) != 0 : access(paths[i], F_OK) == 0);
	}
	CHECK_INT(last.blobs_skipped, skipped);
	/* an image manifest, then an index that points at it */
	char cfg[] = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
	struct rc_blob cb = { .data = cfg, .len = strlen(cfg) };
	kiln_digest_buf(KILN_SHA256, cfg, strlen(cfg), cb.digest);
	CHECK(rc_blob_push(c, "t/par", &cb, &err) == 0);
	char *man = kiln_xasprintf("{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":"
				   "\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
				   "\"layers\":[]}",
				   OCI_MT_OCI_MANIFEST, cb.digest, strlen(cfg));
	char md[KILN_DIGEST_MAX], xd[KILN_DIGEST_MAX], hd[KILN_DIGEST_MAX];
	CHECK(rc_manifest_put(c, "t/par", "v1", OCI_MT_OCI_MANIFEST, man, strlen(man), md, &err) == 0);
	char *idx = kiln_xasprintf("{\"schemaVersion\":2,\"mediaType\":\"%s\",\"manifests\":["
				   "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%zu,"
				   "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}",
				   OCI_MT_OCI_INDEX, OCI_MT_OCI_MANIFEST, md, strlen(man));
	CHECK(rc_manifest_put(c, "t/par", "multi", OCI_MT_OCI_INDEX, idx, strlen(idx), xd, &err) == 0);
	struct rc_doc d;
	CHECK(rc_image_manifest_get(c, "t/par", "multi", &d, &err) == 0);
	CHECK_STR(d.digest, md);
	CHECK_STR(d.media_type, OCI_MT_OCI_MANIFEST);
	CHECK(d.len == strlen(man) && memcmp(d.data, man, d.len) == 0);
	rc_doc_free(&d);
	CHECK(rc_manifest_get(c, "t/par", xd, NULL, &d, &err) == 0);
	CHECK_STR(d.media_type, OCI_MT_OCI_INDEX);
	rc_doc_free(&d);
	CHECK(rc_manifest_exists(c, "t/par", "v1", hd, &err) == 1);
	CHECK_STR(hd, md);
	CHECK(rc_manifest_exists(c, "t/par", "nope", NULL, &err) == 0);
	CHECK(rc_manifest_get(c, "t/par", "nope", NULL, &d, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "MANIFEST_UNKNOWN"));
	kiln_error_clear(&err);
	/* keep-alive: many requests, few connections (parallel 4 + the synchronous handle) */
	const struct rc_client_stats *st = rc_client_stats(c);
	printf("#   %llu requests over %llu connections\n", (unsigned long long)st->requests,
	       (unsigned long long)st->connects);
	CHECK(st->requests >= 15); /* batch queries, batch uploads (kiln serve), manifests */
	CHECK(st->connects <= 6);
	free(man);
	free(idx);
	for (int i = 0; i < N; i++) {
		free(bufs[i]);
		free(paths[i]);
	}
	rc_client_free(c);
}

static void test_auth(void)
{
	kiln_error *err = NULL;
	struct rc_client_opts good = { .user = "ci", .pass = secret }, wrong = { .user = "ci", .pass = "nope" },
			       anon = { .anonymous = 1 };
	rc_client *c = rc_client_new(ahost, &good, &err);
	struct rc_blob b = { .data = "hello", .len = 5 };

	kiln_digest_buf(KILN_SHA256, "hello", 5, b.digest);
	CHECK(rc_client_ping(c, &err) == 0);
	CHECK(rc_blob_push(c, "team/app", &b, &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	CHECK(rc_blob_exists(c, "team/app", b.digest, NULL, &err) == 1);
	CHECK(c->ntokens >= 1); /* tokens came from the realm and are cached */
	rc_client_free(c);

	c = rc_client_new(ahost, &anon, &err);
	CHECK(rc_blob_exists(c, "team/app", b.digest, NULL, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "401"));
	kiln_error_clear(&err);
	rc_client_free(c);

	c = rc_client_new(ahost, &wrong, &err);
	CHECK(rc_client_ping(c, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "not accepted"));
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	rc_client_free(c);

	/* an unreachable registry: a clear error after bounded retries */
	struct rc_client_opts quick = { .retries = 1, .anonymous = 1 };
	c = rc_client_new("127.0.0.1:1", &quick, &err);
	CHECK(rc_client_ping(c, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "127.0.0.1:1") && strstr(kiln_error_message(err), "retries"));
	kiln_error_clear(&err);
	rc_client_free(c);
}

struct late {
	struct reg_config cfg;
	reg_server *srv;
};

static void *start_late(void *ud)
{
	struct late *l = ud;
	kiln_error *err = NULL;
	struct timespec ts = { 0, 400 * 1000000L };
	nanosleep(&ts, NULL);
	l->srv = reg_server_start(&l->cfg, &err);
	kiln_error_free(err);
	return NULL;
}

/* Connection refused at first: the client backs off and retries until the
 * server (started 0.4 s later on that port) answers. */
static void test_retry_until_up(void)
{
	struct late l;
	kiln_error *err = NULL;
	pthread_t th;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);

	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0);
	close(fd);
	reg_config_init(&l.cfg);
	free(l.cfg.data_dir);
	l.cfg.data_dir = kiln_path_join(tmp, "late");
	l.cfg.port = ntohs(a.sin_port);
	l.srv = NULL;
	char h[64];
	snprintf(h, sizeof(h), "127.0.0.1:%u", l.cfg.port);
	rc_client *c = rc_client_new(h, &(struct rc_client_opts){ .retries = 6, .anonymous = 1 }, &err);
	pthread_create(&th, NULL, start_late, &l);
	CHECK(rc_client_ping(c, &err) == 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	CHECK(rc_client_stats(c)->retries >= 1);
	pthread_join(th, NULL);
	CHECK(l.srv != NULL);
	rc_client_free(c);
	if (l.srv)
		reg_server_stop(l.srv);
	reg_config_free(&l.cfg);
}

int main(void)
{
	struct reg_config cfg, acfg;
	kiln_error *err = NULL;
	reg_server *srv, *asrv;

	tmp = kiln_mkdtemp("kiln-regcli", &err);
	char *kh = kiln_path_join(tmp, "home");
	setenv("KILN_HOME", kh, 1);
	free(kh);
	unsetenv("REGISTRY_AUTH_FILE");
	unsetenv("XDG_RUNTIME_DIR");
	reg_config_init(&cfg);
	free(cfg.data_dir);
	cfg.data_dir = kiln_path_join(tmp, "data");
	cfg.port = 0;
	reg_config_init(&acfg);
	free(acfg.data_dir);
	acfg.data_dir = kiln_path_join(tmp, "adata");
	acfg.port = 0;
	acfg.auth = 1;
	const char *scopes[] = { "team:pull,push", NULL };
	srv = reg_server_start(&cfg, &err);
	if (!srv || reg_token_create(&acfg, "ci", scopes, 3600, &secret, &err) < 0 ||
	    !(asrv = reg_server_start(&acfg, &err))) {
		printf("not ok - servers start: %s\n", kiln_error_message(err));
		return 1;
	}
	snprintf(host, sizeof(host), "127.0.0.1:%u", reg_server_port(srv));
	snprintf(ahost, sizeof(ahost), "127.0.0.1:%u", reg_server_port(asrv));
	RUN(test_refs);
	RUN(test_challenge);
	RUN(test_credentials);
	RUN(test_blobs);
	RUN(test_parallel_and_manifests);
	RUN(test_auth);
	RUN(test_retry_until_up);
	reg_server_stop(srv);
	reg_server_stop(asrv);
	reg_config_free(&cfg);
	reg_config_free(&acfg);
	free(secret);
	kiln_rm_rf(tmp, &err);
	free(tmp);
	return test_done();
}
