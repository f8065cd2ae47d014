/* test_registry_limits.c — the failed-authentication limiter (burst, refill,
 * Retry-After, per key kind, memory fixed however many keys an attacker uses)
 * and the config keys of the hostile-load limits. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "registry/internal.h"
#include "registry/server_limits.h"
#include "test.h"

static void test_burst_then_refill(void)
{
	reg_authlim *l = reg_authlim_new(64, 3, 10);
	int64_t t = 1000;

	CHECK_INT(reg_authlim_blocked(l, 'a', "10.0.0.1", t), 0);
	CHECK(!reg_authlim_failed(l, 'a', "10.0.0.1", t));
	for (int i = 0; i < 3; i++) {
		CHECK_INT(reg_authlim_blocked(l, 'a', "10.0.0.1", t), 0);
		reg_authlim_fail(l, 'a', "10.0.0.1", t);
	}
	CHECK(reg_authlim_failed(l, 'a', "10.0.0.1", t));
	/* Three failures at once: out of tries for one refill period. */
	CHECK_INT(reg_authlim_blocked(l, 'a', "10.0.0.1", t), 10);
	CHECK_INT(reg_authlim_blocked(l, 'a', "10.0.0.1", t + 4), 6);
	CHECK_INT(reg_authlim_blocked(l, 'a', "10.0.0.1", t + 10), 0);
	/* Other keys and the other kind are untouched. */
	CHECK_INT(reg_authlim_blocked(l, 'a', "10.0.0.2", t), 0);
	CHECK_INT(reg_authlim_blocked(l, 'n', "10.0.0.1", t), 0);
	/* All forgiven after burst * refill. */
	CHECK(!reg_authlim_failed(l, 'a', "10.0.0.1", t + 30));
	reg_authlim_free(l);
}

static void test_bounded_memory(void)
{
	reg_authlim *l = reg_authlim_new(1000, 2, 60);
	size_t bytes = reg_authlim_bytes(l);
	char key[32];
	int64_t t = 5000;

	/* 1000 rounds up to 1024 slots of 16 bytes. */
	CHECK(bytes < 1024 * 16 + 256);
	/* 100,000 distinct addresses fail: the table does not grow... */
	for (int i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
		reg_authlim_fail(l, 'a', key, t);
	}
	CHECK_INT(reg_authlim_bytes(l), bytes);
	CHECK(reg_authlim_used(l) <= 1024);
	CHECK(reg_authlim_used(l) > 900);
	/* ...and a key that keeps failing is still blocked among the churn: its
	 * slot is the last to be replaced (furthest from forgiven). */
	for (int i = 0; i < 6; i++)
		reg_authlim_fail(l, 'a', "attacker", t);
	for (int i = 0; i < 20000; i++) {
		snprintf(key, sizeof(key), "churn-%d", i);
		reg_authlim_fail(l, 'a', key, t);
	}
	CHECK(reg_authlim_blocked(l, 'a', "attacker", t) > 0);
	reg_authlim_free(l);
}

static void test_config_keys(void)
{
	struct reg_config c;
	kiln_error *err = NULL;
	char path[] = "/tmp/kiln-test-limits-XXXXXX";
	int fd = mkstemp(path);
	const char *good = "{\"header_timeout_s\": 5, \"idle_timeout_s\": 7, \"body_min_rate\": \"2K\", "
			   "\"body_rate_window_s\": 9, \"per_ip_connection_limit\": 11, \"connection_headroom\": 13, "
			   "\"auth_fail_burst\": 4, \"auth_fail_refill_s\": 3, \"auth_fail_slots\": 128}";

	CHECK(fd >= 0);
	CHECK(write(fd, good, strlen(good)) == (ssize_t)strlen(good));
	close(fd);
	reg_config_init(&c);
	CHECK_INT(c.header_timeout_s, 10);
	CHECK_INT(c.per_ip_connection_limit, 512);
	CHECK_INT(reg_config_load(&c, path, &err), 0);
	CHECK_INT(c.header_timeout_s, 5);
	CHECK_INT(c.idle_timeout_s, 7);
	CHECK_INT(c.body_min_rate, 2048);
	CHECK_INT(c.body_rate_window_s, 9);
	CHECK_INT(c.per_ip_connection_limit, 11);
	CHECK_INT(c.connection_headroom, 13);
	CHECK_INT(c.auth_fail_burst, 4);
	CHECK_INT(c.auth_fail_refill_s, 3);
	CHECK_INT(c.auth_fail_slots, 128);
	kiln_error_clear(&err);
	/* Out of range: a clear error naming the key. */
	fd = open(path, O_WRONLY | O_TRUNC);
	CHECK(write(fd, "{\"auth_fail_burst\": 0}", 22) == 22);
	close(fd);
	CHECK_INT(reg_config_load(&c, path, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "auth_fail_burst"));
	kiln_error_clear(&err);
	reg_config_free(&c);
	unlink(path);
}

int main(void)
{
	RUN(test_burst_then_refill);
	RUN(test_bounded_memory);
	RUN(test_config_keys);
	return test_done();
}
