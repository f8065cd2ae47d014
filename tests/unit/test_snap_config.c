/* test_snap_config.c — the template config as a struct: what snap_config_write
 * gives snap_config_read gives back (and the same bytes again, so a config
 * re-written keeps its digest), a config as kiln has always written it is
 * read unchanged, and hostile configs are refused naming the file and field. */
#include <stdlib.h>
#include <string.h>

#include "snapshots/internal.h"
#include "test.h"

#define HEX(c) c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c c

/* A config as snap_finalize has written it (json_pack, canonical dump). */
static char *finalize_style(void)
{
	json_t *j = json_pack("{s:i, s:s, s:s, s:s, s:n, s:s, s:n, s:[s,s], s:i, s:i, s:s, "
			      "s:{s:s, s:s, s:s, s:i, s:I, s:s, s:s, s:s}}",
			      "schemaVersion", 1, "mediaType", KILN_TMPL_CONFIG_MEDIA, "created", "2026-12-01T10:00:00Z",
			      "start", "python3 -m http.server", "ready", "user", "app", "workdir", "env",
			      "PATH=/usr/bin:/bin", "A=b=c", "cpus", 2, "memory_mib", 512, "network", "outbound", "depends",
			      "qemu", "7.2.22", "machine", "pc-q35 -smp 2", "accel", "tcg", "agent_protocol", 1, "tsc_khz",
			      (json_int_t)2995200, "kernel_digest", "sha256:" HEX("e"), "kernel_release", "6.1.0", "boot_id",
			      "0b1c");
	static const char *const roles[] = { "rootfs", "disk", "memory", "state" };
	static const char *const media[] = { "application/vnd.kiln.rootfs.ext4", "application/vnd.kiln.disk.qcow2",
					     "application/vnd.kiln.memory.raw", "application/vnd.kiln.qemu-state" };
	static const char *const digests[] = { "sha256:" HEX("a"), "sha256:" HEX("b"), "sha256:" HEX("c"),
					       "sha256:" HEX("d") };
	for (int i = 0; i < 4; i++)
		json_object_set_new(j, roles[i], json_pack("{s:s, s:s, s:I}", "mediaType", media[i], "digest", digests[i],
							   "size", (json_int_t)(1000 + i)));
	char *text = kiln_json_dumps_canonical(j);
	json_decref(j);
	return text;
}

static void test_round_trip(void)
{
	struct snap_config c = { 0 }, d = { 0 };
	kiln_error *err = NULL;

	c.created = kiln_xstrdup("2026-12-01T10:00:00Z");
	c.start = kiln_xstrdup("sleep 1000 &");
	c.workdir = kiln_xstrdup("/srv");
	kiln_strv_push(&c.env, "PATH=/bin");
	kiln_strv_push(&c.env, "EMPTY=");
	c.cpus = 4;
	c.memory_mib = 1024;
	c.has_network = true;
	c.network = VM_NET_NONE;
	c.has_depends = true;
	c.depends.qemu = kiln_xstrdup("7.2");
	c.depends.machine = kiln_xstrdup("m");
	c.depends.accel = kiln_xstrdup("kvm");
	c.depends.kernel_digest = kiln_xstrdup("sha256:00");
	c.depends.kernel_release = kiln_xstrdup("6.1");
	c.depends.agent_protocol = 1;
	snap_config_set_blob(&c, SNAP_ROLE_ROOTFS, "sha256:" HEX("1"), 4096);
	snap_config_set_blob(&c, SNAP_ROLE_DISK, "sha256:" HEX("2"), 0);
	snap_config_set_blob(&c, SNAP_ROLE_MEMORY, "sha256:" HEX("3"), (uint64_t)1 << 40);
	snap_config_set_blob(&c, SNAP_ROLE_STATE, "sha256:" HEX("4"), 60000);
	char *text = snap_config_write(&c);
	CHECK_INT(snap_config_read(text, strlen(text), "mem", &d, &err), 0);
	CHECK(err == NULL);
	CHECK_STR(d.created, c.created);
	CHECK_STR(d.start, c.start);
	CHECK(d.ready == NULL && d.user == NULL);
	CHECK_STR(d.workdir, "/srv");
	CHECK_INT(d.env.n, 2);
	if (d.env.n == 2)
		CHECK_STR(d.env.v[1], "EMPTY=");
	CHECK_INT(d.cpus, 4);
	CHECK_INT(d.memory_mib, 1024);
	CHECK(d.has_network && d.network == VM_NET_NONE);
	CHECK(d.has_depends && d.depends.boot_id == NULL && d.depends.tsc_khz == 0);
	CHECK_STR(d.depends.accel, "kvm");
	CHECK_INT(d.depends.agent_protocol, 1);
	for (int r = 0; r < SNAP_NROLES; r++) {
		CHECK_STR(d.blob[r].digest, c.blob[r].digest);
		CHECK_INT(d.blob[r].size, c.blob[r].size);
	}
	CHECK(snap_config_blob(&d, "memory") == &d.blob[SNAP_ROLE_MEMORY]);
	CHECK(snap_config_blob(&d, "config") == NULL);
	char *again = snap_config_write(&d);
	CHECK_STR(again, text);
	free(again);
	free(text);
	snap_config_free(&c);
	snap_config_free(&d);
	kiln_error_free(err);
}

/* A template made before keeps its digest when re-written (kiln sandbox commit). */
static void test_finalize_bytes(void)
{
	struct snap_config c;
	kiln_error *err = NULL;
	char *text = finalize_style();

	CHECK_INT(snap_config_read(text, strlen(text), "cfg", &c, &err), 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	char *again = snap_config_write(&c);
	CHECK_STR(again, text);
	CHECK_STR(c.ready == NULL ? "null" : c.ready, "null");
	CHECK_STR(c.depends.boot_id, "0b1c");
	CHECK_INT(c.depends.tsc_khz, 2995200);
	free(again);
	free(text);
	snap_config_free(&c);
	kiln_error_free(err);
}

/* A template made before templates had a NIC has no "network": none recorded, none written. */
static void test_no_network(void)
{
	struct snap_config c;
	kiln_error *err = NULL;
	char *text = finalize_style();
	json_t *j = json_loads(text, 0, NULL);

	json_object_del(j, "network");
	free(text);
	text = kiln_json_dumps_canonical(j);
	CHECK_INT(snap_config_read(text, strlen(text), "cfg", &c, &err), 0);
	CHECK(!c.has_network);
	char *again = snap_config_write(&c);
	CHECK_STR(again, text);
	free(again);
	free(text);
	json_decref(j);
	snap_config_free(&c);
	kiln_error_free(err);
}

/* One change to a good config: path "a" or "a.b", value JSON (NULL: delete). */
struct hostile {
	const char *path, *value, *want;
};

static void test_hostile(void)
{
	static const struct hostile cases[] = {
		{ "schemaVersion", "2", "not a kiln template config" },
		{ "mediaType", "\"application/json\"", "not a kiln template config" },
		{ "memory", NULL, "field \"memory\" is missing" },
		{ "memory", "[]", "field \"memory\" is not an object" },
		{ "memory.digest", NULL, "field \"memory.digest\" is missing" },
		{ "memory.digest", "\"sha256:../../../etc/shadow\"", "is not sha256:<64 hex digits>" },
		{ "disk.digest", "\"/etc/shadow\"", "disk digest '/etc/shadow' is not sha256:<64 hex digits>" },
		{ "state.digest", "\"sha512:00\"", "is not sha256:<64 hex digits>" },
		{ "rootfs.digest", "\"sha256:" HEX("A") "\"", "is not sha256:<64 hex digits>" },
		{ "rootfs.digest", "\"sha256:" HEX("a") "0\"", "is not sha256:<64 hex digits>" },
		{ "memory.size", "-1", "field \"memory.size\" is -1, not in [0," },
		{ "memory.size", "\"12\"", "field \"memory.size\" is not an integer" },
		{ "memory.size", NULL, "field \"memory.size\" is missing" },
		{ "memory.mediaType", "\"application/vnd.kiln.disk.qcow2\"", "field \"memory.mediaType\" is" },
		{ "memory.path", "\"/etc\"", "field \"memory.path\" is unknown" },
		{ "env", "\"PATH=/bin\"", "field \"env\" is not an array" },
		{ "env", "[\"A=1\", 7]", "field \"env[1]\" is not a NAME=VALUE string" },
		{ "env", "[\"=x\"]", "field \"env[0]\" is not a NAME=VALUE" },
		{ "env", "[\"NOEQUALS\"]", "field \"env[0]\" is not a NAME=VALUE" },
		{ "user", "5", "field \"user\" is not a string or null" },
		{ "start", "{}", "field \"start\" is not a string or null" },
		{ "cpus", "0", "field \"cpus\" is 0, not in [1, 4096]" },
		{ "cpus", "1.5", "field \"cpus\" is not an integer" },
		{ "memory_mib", "99999999999", "field \"memory_mib\" is 99999999999" },
		{ "network", "\"bridge\"", "field \"network\"" },
		{ "network", "1", "field \"network\" is not a string" },
		{ "depends", "\"x\"", "field \"depends\" is not an object" },
		{ "depends.accel", "\"hvf\"", "field \"depends.accel\" is neither" },
		{ "depends.machine", NULL, "field \"depends.machine\" is missing" },
		{ "depends.agent_protocol", "0", "field \"depends.agent_protocol\" is 0" },
		{ "depends.tsc_khz", "-5", "field \"depends.tsc_khz\" is -5" },
		{ "depends.extra", "1", "field \"depends.extra\" is unknown" },
		{ "evil", "true", "field \"evil\" is unknown" },
	};
	char *good = finalize_style();
	kiln_error *err = NULL;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *j = json_loads(good, 0, NULL), *o = j;
		const char *dot = strchr(cases[i].path, '.'), *key = cases[i].path;
		char parent[32] = "";
		if (dot) {
			snprintf(parent, sizeof(parent), "%.*s", (int)(dot - key), key);
			o = json_object_get(j, parent);
			key = dot + 1;
		}
		if (cases[i].value)
			json_object_set_new(o, key, json_loads(cases[i].value, JSON_DECODE_ANY, NULL));
		else
			json_object_del(o, key);
		char *text = json_dumps(j, JSON_COMPACT);
		struct snap_config c;
		int rc = snap_config_read(text, strlen(text), "/store/blobs/sha256/x", &c, &err);
		CHECK_INT(rc, -1);
		const char *msg = err ? kiln_error_message(err) : "";
		if (!strstr(msg, cases[i].want) || strncmp(msg, "/store/blobs/sha256/x: ", 23) != 0) {
			printf("#   case %s=%s: got '%s', want '%s'\n", cases[i].path, cases[i].value ? cases[i].value : "(none)",
			       msg, cases[i].want);
			CHECK(0);
		}
		CHECK(err == NULL || err->kind == KILN_E_INVALID);
		/* nothing is left to free on error */
		CHECK(c.created == NULL && c.env.n == 0);
		kiln_error_clear(&err);
		free(text);
		json_decref(j);
	}
	/* not JSON, not an object, a duplicated key (which would read two ways) */
	static const char *const raw[] = { "{\"schemaVersion\":", "[1]", "{\"schemaVersion\":1,\"schemaVersion\":1}" };
	static const char *const want[] = { "invalid JSON", "not a JSON object", "invalid JSON" };
	for (int i = 0; i < 3; i++) {
		struct snap_config c;
		CHECK_INT(snap_config_read(raw[i], strlen(raw[i]), "f", &c, &err), -1);
		CHECK(err && strstr(kiln_error_message(err), want[i]) && strncmp(kiln_error_message(err), "f", 1) == 0);
		kiln_error_clear(&err);
	}
	free(good);
}

int main(void)
{
	RUN(test_round_trip);
	RUN(test_finalize_bytes);
	RUN(test_no_network);
	RUN(test_hostile);
	return test_done();
}
