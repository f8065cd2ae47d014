/* test_service_route.c — the service core's route table (service/route.c):
 * rows matched in order by method and pattern, {name} capturing one
 * non-empty segment and {name*} the rest, HEAD served by GET rows and
 * "*" rows taking any method; another method on a matching
 * path is told apart from no route; hostile paths match nothing. */
#include <stdlib.h>
#include <string.h>

#include "service/service.h"
#include "test.h"

struct row {
	struct svc_route rt;
	int n;
};

static const struct row ROWS[] = {
	{ { "POST", "builds" }, 1 },
	{ { "GET", "builds" }, 2 },
	{ { "GET", "builds/{id}" }, 3 },
	{ { "GET", "builds/{id}/logs" }, 4 },
	{ { "PUT", "blobs/{digest*}" }, 5 },
	{ { "GET", "t/{a}/b/{c}" }, 6 },
	{ { "*", "any/{rest*}" }, 7 },
};

/* The row's number for METHOD PATH (0: none), its first capture into cap. */
static int find(const char *method, const char *path, char *cap, size_t cap_len, bool *other)
{
	struct svc_route_match m;
	const struct row *r = (const struct row *)svc_route_find(ROWS, sizeof(ROWS) / sizeof(ROWS[0]), sizeof(ROWS[0]),
								   method, path, &m);
	snprintf(cap, cap_len, "%s", m.n ? m.param[0] : "");
	if (other)
		*other = m.other_method;
	svc_route_match_free(&m);
	return r ? r->n : 0;
}

static void test_match(void)
{
	char c[128];
	bool other = false;

	CHECK(find("POST", "builds", c, sizeof(c), NULL) == 1);
	CHECK(find("GET", "builds", c, sizeof(c), NULL) == 2);
	CHECK(find("GET", "builds/abc", c, sizeof(c), NULL) == 3 && strcmp(c, "abc") == 0);
	CHECK(find("GET", "builds/abc/logs", c, sizeof(c), NULL) == 4 && strcmp(c, "abc") == 0);
	CHECK(find("PUT", "blobs/sha256:00/x", c, sizeof(c), NULL) == 5 && strcmp(c, "sha256:00/x") == 0);

	struct svc_route_match m;
	const struct svc_route *rt = svc_route_find(ROWS, sizeof(ROWS) / sizeof(ROWS[0]), sizeof(ROWS[0]), "GET", "t/x/b/yy", &m);
	CHECK(rt == &ROWS[5].rt && m.n == 2 && strcmp(m.param[0], "x") == 0 && strcmp(m.param[1], "yy") == 0);
	svc_route_match_free(&m);
	CHECK(m.n == 0 && m.route == NULL);

	/* HEAD is served by a GET row; "*" takes any method */
	CHECK(find("HEAD", "builds/abc", c, sizeof(c), NULL) == 3);
	CHECK(find("HEAD", "builds", c, sizeof(c), NULL) == 2);
	CHECK(find("DELETE", "any/x/y", c, sizeof(c), NULL) == 7 && strcmp(c, "x/y") == 0);
	CHECK(find("PATCH", "any/z", c, sizeof(c), NULL) == 7);
	CHECK(find("GET", "any/", c, sizeof(c), NULL) == 0);

	/* another method on a path a row matches, and no row at all */
	CHECK(find("DELETE", "builds/abc", c, sizeof(c), &other) == 0 && other);
	CHECK(find("GET", "nothing", c, sizeof(c), &other) == 0 && !other);
}

static void test_hostile(void)
{
	char c[128];

	CHECK(find("GET", "builds/", c, sizeof(c), NULL) == 0);      /* an empty segment captures nothing */
	CHECK(find("GET", "builds//logs", c, sizeof(c), NULL) == 0);
	CHECK(find("GET", "builds/a/b", c, sizeof(c), NULL) == 0);   /* {id} is one segment */
	CHECK(find("GET", "builds/a/logs/", c, sizeof(c), NULL) == 0);
	CHECK(find("GET", "buildsX", c, sizeof(c), NULL) == 0);
	CHECK(find("GET", "build", c, sizeof(c), NULL) == 0);
	CHECK(find("PUT", "blobs/", c, sizeof(c), NULL) == 0);
	CHECK(find("GET", "", c, sizeof(c), NULL) == 0);
	CHECK(find("get", "builds", c, sizeof(c), NULL) == 0);      /* methods are case-sensitive (RFC 9110) */
}

int main(void)
{
	RUN(test_match);
	RUN(test_hostile);
	return test_done();
}
