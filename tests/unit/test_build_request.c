/* test_build_request.c — the build request's one table (builder/request.c):
 * JSON in and out round-trips every field, bad values are refused naming the
 * key (or the --flag), the server's own fields are refused from a client,
 * and build_run's options come out of it as kiln build's flags made them. */
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "test.h"

static json_t *parse(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);

	CHECK(j != NULL);
	return j;
}

/* The error message of from_json on text (server_fields as given), or "" when it passes. */
static char *refusal(const char *text, bool server)
{
	json_t *j = parse(text);
	struct build_request r;
	kiln_error *err = NULL;
	char *msg;

	if (build_request_from_json(j, server, &r, &err) == 0) {
		build_request_free(&r);
		msg = kiln_xstrdup("");
	} else {
		msg = kiln_xstrdup(kiln_error_message(err));
		kiln_error_free(err);
	}
	json_decref(j);
	return msg;
}

#define REFUSED(text, server, want)                    \
	do {                                           \
		char *m_ = refusal((text), (server));  \
		CHECK_STR(m_, (want));                 \
		free(m_);                              \
	} while (0)

static void test_round_trip(void)
{
	const char *in = "{\"name\":\"app:v1\",\"target\":\"run\",\"build_args\":[[\"A\",\"1\"],[\"B\",\"\"]],"
			 "\"no_cache\":true,\"compression\":\"zstd\",\"start_cmd\":\"serve\",\"ready_cmd\":\"true\","
			 "\"ready_timeout_s\":7,\"cpus\":2,\"memory_mib\":512,\"template_network\":\"outbound\","
			 "\"files\":[]}";
	json_t *j = parse(in), *out = json_object();
	struct build_request r;
	kiln_error *err = NULL;

	CHECK(build_request_from_json(j, false, &r, &err) == 0);
	json_decref(j); /* the request holds what its strings point into */
	CHECK_STR(r.name, "app:v1");
	CHECK_STR(r.target, "run");
	CHECK_INT(r.n_build_args, 2);
	CHECK_STR(r.build_args[1].key, "B");
	CHECK_STR(r.build_args[1].value, "");
	CHECK(r.no_cache && !r.template_ && build_request_wants_template(&r));
	CHECK_INT(r.ready_timeout_s, 7);
	CHECK_INT(r.memory_mib, 512);
	build_request_to_json(&r, out);
	char *s = json_dumps(out, JSON_SORT_KEYS | JSON_COMPACT);
	CHECK_STR(s, "{\"build_args\":[[\"A\",\"1\"],[\"B\",\"\"]],\"compression\":\"zstd\",\"cpus\":2,"
		     "\"memory_mib\":512,\"name\":\"app:v1\",\"no_cache\":true,\"ready_cmd\":\"true\","
		     "\"ready_timeout_s\":7,\"start_cmd\":\"serve\",\"target\":\"run\",\"template\":true,"
		     "\"template_network\":\"outbound\"}");
	free(s);
	json_decref(out);

	/* what is unset is not written: an empty request is an empty object */
	struct build_request none = { 0 };
	out = json_object();
	build_request_to_json(&none, out);
	CHECK_INT(json_object_size(out), 0);
	json_decref(out);

	/* and build_run's options */
	struct build_options o = { 0 };
	struct build_template_opts t = { 0 };
	CHECK(build_request_options(&r, &o, &t, &err) == 0);
	CHECK(o.template == &t && o.compression == BUILD_ZSTD && o.no_cache);
	CHECK(t.network == VM_NET_OUTBOUND && t.ready_timeout_ms == 7000 && t.cpus == 2);
	CHECK(o.n_build_args == 2 && strcmp(o.target, "run") == 0);
	build_request_free(&r);
	CHECK(r.name == NULL && r.build_args == NULL);

	CHECK(build_request_options(&none, &o, &t, &err) == 0);
	CHECK(o.template == NULL && o.compression == BUILD_GZIP && !o.no_cache);
}

static void test_refused(void)
{
	REFUSED("{\"ready_timeout_s\":0}", false, "ready_timeout_s: want seconds from 1 to 86400");
	REFUSED("{\"ready_timeout_s\":86401}", false, "ready_timeout_s: want seconds from 1 to 86400");
	REFUSED("{\"cpus\":-1}", false, "cpus: want a number from 1 to 64");
	REFUSED("{\"cpus\":\"2\"}", false, "cpus: want a number from 1 to 64");
	REFUSED("{\"template_network\":\"all\"}", false, "template_network: network 'all': want none or outbound");
	REFUSED("{\"compression\":\"lz4\"}", false, "compression 'lz4': want gzip, zstd or none");
	REFUSED("{\"compression\":7}", false, "compression: want a string");
	REFUSED("{\"no_cache\":1}", false, "no_cache: want true or false");
	REFUSED("{\"build_args\":{\"A\":\"1\"}}", false, "build_args: want [[KEY, VALUE], ...]");
	REFUSED("{\"build_args\":[[\"\",\"1\"]]}", false, "build_args[0]: want [KEY, VALUE] with a non-empty KEY");
	REFUSED("{\"build_args\":[[\"A\",\"1\"],[\"B\",2]]}", false,
		"build_args[1]: want [KEY, VALUE] with a non-empty KEY");
	REFUSED("[]", false, "a build request is a JSON object");
	/* what only the server sets: a client would choose its own cache keys or bases */
	REFUSED("{\"context_digests\":\"/etc/x\"}", false, "context_digests: set by the build server, not by a request");
	REFUSED("{\"registry_bases\":false}", false, "registry_bases: set by the build server, not by a request");
	REFUSED("{\"public_urls\":true}", false, "public_urls: set by the build server, not by a request");
	REFUSED("{\"public_urls\":true,\"registry_bases\":true,\"context_digests\":\"d.json\"}", true, "");
	/* null is unset, as an absent key; other keys are the caller's */
	REFUSED("{\"target\":null,\"files\":[1],\"dockerfile\":\"FROM scratch\"}", false, "");

	char *big = kiln_xcalloc(1, 70000);
	memset(big, 'x', 69990);
	char *text = kiln_xasprintf("{\"start_cmd\":\"%s\"}", big);
	REFUSED(text, false, "start_cmd: longer than 65536 bytes");
	free(text);
	free(big);
}

/* What kiln build's flags set is checked as JSON is, naming the flag. */
static void test_flags(void)
{
	struct build_request r = { .compression = "bz2" };
	kiln_error *err = NULL;

	CHECK(build_request_check(&r, true, &err) < 0);
	CHECK_STR(kiln_error_message(err), "--compression 'bz2': want gzip, zstd or none");
	kiln_error_clear(&err);
	r = (struct build_request){ .template_network = "host" };
	CHECK(build_request_check(&r, true, &err) < 0);
	CHECK_STR(kiln_error_message(err), "--template-network: network 'host': want none or outbound");
	kiln_error_clear(&err);
	r = (struct build_request){ .cpus = 65 };
	CHECK(build_request_check(&r, false, &err) < 0);
	CHECK_STR(kiln_error_message(err), "cpus: want a number from 1 to 64");
	kiln_error_clear(&err);

	/* every row names a JSON key once, and every flag is a flag once */
	for (size_t i = 0; i < build_nfields; i++)
		for (size_t k = i + 1; k < build_nfields; k++) {
			CHECK(strcmp(build_fields[i].key, build_fields[k].key) != 0);
			CHECK(!build_fields[i].flag || !build_fields[k].flag ||
			      strcmp(build_fields[i].flag, build_fields[k].flag) != 0);
		}
}

int main(void)
{
	RUN(test_round_trip);
	RUN(test_refused);
	RUN(test_flags);
	return test_done();
}
