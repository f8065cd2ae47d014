/* test_oci_manifest.c — the registry's pure parts: manifest validation
 * per media type, repository name and tag grammar, config file and --addr. */
#include <stdlib.h>
#include <string.h>

#include "registry/registry.h"
#include "regclient/regclient.h"
#include "test.h"

#define D1 "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define D2 "sha256:486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"

static int parse(const char *json, const char *ct, struct oci_manifest *m)
{
	kiln_error *err = NULL;
	int r = oci_manifest_parse(json, strlen(json), ct, m, &err);

	if (r < 0) {
		printf("#   parse: %s\n", kiln_error_message(err));
		kiln_error_free(err);
	}
	return r;
}

static void test_image_manifest(void)
{
	struct oci_manifest m;
	const char *j = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
			"\"config\":{\"mediaType\":\"application/vnd.example+json\",\"digest\":\"" D1 "\",\"size\":5},"
			"\"layers\":[{\"mediaType\":\"l\",\"digest\":\"" D2 "\",\"size\":7},"
			"{\"mediaType\":\"l\",\"digest\":\"" D1 "\",\"size\":1,\"urls\":[\"https://x\"]}],"
			"\"subject\":{\"mediaType\":\"m\",\"digest\":\"" D2 "\",\"size\":9},\"annotations\":{\"k\":\"v\"}}";

	CHECK(parse(j, NULL, &m) == 0);
	CHECK_STR(m.media_type, "application/vnd.oci.image.manifest.v1+json");
	CHECK_INT(m.nrefs, 3);
	CHECK_INT(m.is_index, 0);
	CHECK_STR(m.refs[0].digest, D2);
	CHECK_INT(m.refs[0].external, 0);
	CHECK_INT(m.refs[1].external, 1);
	CHECK_INT(m.refs[2].kind, OCI_REF_CONFIG);
	CHECK_INT(m.refs[2].size, 5);
	CHECK_STR(m.subject, D2);
	/* artifactType falls back to the config's media type for referrers */
	CHECK_STR(m.artifact_type, "application/vnd.example+json");
	CHECK(m.annotations != NULL);
	oci_manifest_free(&m);
	/* Content-Type with parameters is accepted */
	CHECK(parse(j, "application/vnd.oci.image.manifest.v1+json; charset=utf-8", &m) == 0);
	oci_manifest_free(&m);
}

static void test_index_and_docker(void)
{
	struct oci_manifest m;
	const char *idx = "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"" D1 "\",\"size\":3}],"
			  "\"artifactType\":\"application/x-art\"}";
	const char *dl = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.list.v2+json\","
			 "\"manifests\":[]}";

	CHECK(parse(idx, "application/vnd.oci.image.index.v1+json", &m) == 0);
	CHECK_INT(m.is_index, 1);
	CHECK_INT(m.nrefs, 1);
	CHECK_INT(m.refs[0].kind, OCI_REF_MANIFEST);
	CHECK_STR(m.artifact_type, "application/x-art");
	oci_manifest_free(&m);
	/* no mediaType and no Content-Type: the shape decides */
	CHECK(parse(idx, NULL, &m) == 0);
	CHECK_STR(m.media_type, "application/vnd.oci.image.index.v1+json");
	oci_manifest_free(&m);
	CHECK(parse(dl, NULL, &m) == 0);
	CHECK_INT(m.is_index, 1);
	CHECK_INT(m.nrefs, 0);
	oci_manifest_free(&m);
}

static void expect_invalid(const char *json, const char *ct, const char *needle)
{
	struct oci_manifest m;
	kiln_error *err = NULL;

	CHECK(oci_manifest_parse(json, strlen(json), ct, &m, &err) < 0);
	CHECK(err != NULL && strstr(kiln_error_message(err), needle) != NULL);
	if (err && !strstr(kiln_error_message(err), needle))
		printf("#   message: %s (want %s)\n", kiln_error_message(err), needle);
	kiln_error_free(err);
}

static void test_invalid(void)
{
	expect_invalid("{\"schemaVersion\":2", NULL, "manifest");
	expect_invalid("[]", NULL, "not a JSON object");
	expect_invalid("{\"schemaVersion\":1,\"config\":{},\"layers\":[]}", NULL, "schemaVersion");
	expect_invalid("{\"schemaVersion\":2,\"layers\":[]}", NULL, "config");
	expect_invalid("{\"schemaVersion\":2,\"mediaType\":\"text/plain\"}", NULL, "unsupported manifest media type");
	expect_invalid("{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[]}",
		       "application/vnd.oci.image.manifest.v1+json", "does not match");
	expect_invalid("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"c\",\"digest\":\"sha256:abc\",\"size\":1},"
		       "\"layers\":[]}", NULL, "config");
	expect_invalid("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"c\",\"digest\":\"" D1 "\",\"size\":-4},"
		       "\"layers\":[]}", NULL, "size");
	expect_invalid("{\"schemaVersion\":2,\"config\":{\"mediaType\":\"c\",\"digest\":\"" D1 "\",\"size\":1},"
		       "\"layers\":[{\"digest\":\"" D1 "\",\"size\":1}]}", NULL, "layers[0]: mediaType");
	expect_invalid("{\"schemaVersion\":2,\"manifests\":[5]}", NULL, "manifests[0]");
	expect_invalid("{\"schemaVersion\":2,\"manifests\":[],\"annotations\":{\"a\":1}}", NULL, "annotations.a");
	expect_invalid("{\"schemaVersion\":2,\"manifests\":[],\"subject\":{\"mediaType\":\"m\",\"size\":1}}", NULL,
		       "subject");
}

static void test_names(void)
{
	CHECK(oci_name_valid("foo"));
	CHECK(oci_name_valid("team/app"));
	CHECK(oci_name_valid("a.b_c__d-e---f/g0"));
	CHECK(!oci_name_valid(""));
	CHECK(!oci_name_valid("Foo"));
	CHECK(!oci_name_valid("foo/"));
	CHECK(!oci_name_valid("/foo"));
	CHECK(!oci_name_valid("foo//bar"));
	CHECK(!oci_name_valid("a..b"));
	CHECK(!oci_name_valid("a___b"));
	CHECK(!oci_name_valid("-a"));
	CHECK(!oci_name_valid("a-"));
	CHECK(!oci_name_valid("../etc"));
	char longname[300];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[299] = '\0';
	CHECK(!oci_name_valid(longname));
	CHECK(oci_tag_valid("latest"));
	CHECK(oci_tag_valid("v1.2.3-rc_1"));
	CHECK(oci_tag_valid("_x"));
	CHECK(!oci_tag_valid(""));
	CHECK(!oci_tag_valid(".x"));
	CHECK(!oci_tag_valid("-x"));
	CHECK(!oci_tag_valid("a/b"));
	char longtag[130];
	memset(longtag, 'a', sizeof(longtag) - 1);
	longtag[129] = '\0';
	CHECK(!oci_tag_valid(longtag));
	longtag[128] = '\0';
	CHECK(oci_tag_valid(longtag));
}

static void test_config(void)
{
	struct reg_config c;
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-regcfg", &err), *path = kiln_path_join(dir, "c.json");
	const char *good = "{\"addr\":\"[::1]:7000\",\"data\":\"/srv/reg\",\"manifest_max\":\"1M\",\"timeout_s\":5}";

	reg_config_init(&c);
	CHECK_STR(c.host, "127.0.0.1");
	CHECK_INT(c.port, 5000);
	CHECK(kiln_write_atomic(path, good, strlen(good), 0644, &err) == 0);
	CHECK(reg_config_load(&c, path, &err) == 0);
	CHECK_STR(c.host, "::1");
	CHECK_INT(c.port, 7000);
	CHECK_STR(c.data_dir, "/srv/reg");
	CHECK_INT(c.manifest_max, 1 << 20);
	CHECK_INT(c.timeout_s, 5);
	CHECK(kiln_write_atomic(path, "{\"tiemout_s\":5}", 15, 0644, &err) == 0);
	CHECK(reg_config_load(&c, path, &err) < 0);
	CHECK(err && strstr(kiln_error_message(err), "unknown key 'tiemout_s'"));
	kiln_error_clear(&err);
	CHECK(reg_config_set_addr(&c, ":0", &err) == 0);
	CHECK_STR(c.host, "127.0.0.1");
	CHECK_INT(c.port, 0);
	CHECK(reg_config_set_addr(&c, "localhost", &err) < 0);
	kiln_error_clear(&err);
	CHECK(reg_config_set_addr(&c, "1.2.3.4:99999", &err) < 0);
	kiln_error_clear(&err);
	reg_config_free(&c);
	kiln_rm_rf(dir, &err);
	free(path);
	free(dir);
}

int main(void)
{
	RUN(test_image_manifest);
	RUN(test_index_and_docker);
	RUN(test_invalid);
	RUN(test_names);
	RUN(test_config);
	return test_done();
}
