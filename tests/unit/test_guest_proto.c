/* test_guest_proto.c — the agent protocol codec on its own: header checks,
 * frames reassembled from a stream cut at every byte, message round trips,
 * and the decoders' refusal of malformed payloads (with a reason). */
#include <stdlib.h>
#include <string.h>

#include "guest/guest.h"
#include "test.h"

static void put_tlv(struct guest_wbuf *w, uint16_t tag, const void *p, uint32_t n)
{
	uint8_t h[6] = { (uint8_t)(tag >> 8), (uint8_t)tag };
	guest_put_u32(h + 2, n);
	guest_wbuf_put(w, h, 6);
	guest_wbuf_put(w, p, n);
}

static void test_header(void)
{
	uint8_t h[GUEST_HDR_LEN];
	struct guest_frame f;
	const char *why = NULL;

	guest_hdr_encode(h, GUEST_F_EXEC, 0x01020304, 77);
	CHECK(h[0] == 'K' && h[1] == 'A');
	CHECK_INT(guest_hdr_decode(h, &f, &why), 0);
	CHECK_INT(f.type, GUEST_F_EXEC);
	CHECK_INT(f.id, 0x01020304);
	CHECK_INT(f.len, 77);
	h[0] = 'X';
	CHECK_INT(guest_hdr_decode(h, &f, &why), -1);
	CHECK(why && strstr(why, "magic"));
	guest_hdr_encode(h, GUEST_F_STDOUT, 1, GUEST_MAX_PAYLOAD);
	CHECK_INT(guest_hdr_decode(h, &f, &why), 0);
	guest_hdr_encode(h, GUEST_F_STDOUT, 1, GUEST_MAX_PAYLOAD + 1);
	CHECK_INT(guest_hdr_decode(h, &f, &why), -1);
	CHECK(why && strstr(why, "limit"));
	guest_hdr_encode(h, GUEST_F_STDOUT, 1, 0);
	h[3] = 1;
	CHECK_INT(guest_hdr_decode(h, &f, &why), -1);
}

/* Several frames fed one byte at a time come out whole and in order. */
static void test_framer_split(void)
{
	struct guest_wbuf w = { 0 };
	struct guest_framer fr;
	struct guest_frame f;
	const char *why = NULL;
	int got = 0, r;
	char big[100000];

	memset(big, 'x', sizeof(big));
	guest_frame_raw(&w, GUEST_F_PING, 1, "abc", 3);
	guest_frame_raw(&w, GUEST_F_STDOUT, 2, big, sizeof(big));
	guest_frame_raw(&w, GUEST_F_STDIN_EOF, 3, NULL, 0);
	guest_framer_init(&fr);
	for (size_t i = 0; i < w.len; i++) {
		size_t room;
		uint8_t *sp = guest_framer_space(&fr, &room);
		CHECK(sp != NULL && room > 0);
		if (sp == NULL)
			break;
		*sp = w.data[i];
		guest_framer_commit(&fr, 1);
		while ((r = guest_framer_next(&fr, &f, &why)) > 0) {
			got++;
			if (got == 1)
				CHECK(f.type == GUEST_F_PING && f.id == 1 && f.len == 3 && memcmp(f.payload, "abc", 3) == 0);
			if (got == 2)
				CHECK(f.type == GUEST_F_STDOUT && f.len == sizeof(big) && f.payload[99999] == 'x');
			if (got == 3)
				CHECK(f.type == GUEST_F_STDIN_EOF && f.id == 3 && f.len == 0);
		}
		CHECK(r == 0);
	}
	CHECK_INT(got, 3);
	guest_framer_free(&fr);
	guest_wbuf_free(&w);
}

static void test_frame_limit(void)
{
	struct guest_wbuf w = { 0 };
	char *big = calloc(1, GUEST_MAX_PAYLOAD + 1);

	CHECK_INT(guest_frame_raw(&w, GUEST_F_STDOUT, 1, big, GUEST_MAX_PAYLOAD + 1), -1);
	CHECK_INT(w.len, 0); /* nothing half-built is left behind */
	CHECK_INT(guest_frame_raw(&w, GUEST_F_STDOUT, 1, big, GUEST_MAX_PAYLOAD), 0);
	CHECK_INT(w.len, GUEST_HDR_LEN + GUEST_MAX_PAYLOAD);
	free(big);
	guest_wbuf_free(&w);
}

static void test_exec_roundtrip(void)
{
	char *argv[] = { "sh", "-c", "echo 'hi there'", NULL };
	char *env[] = { "A=1", "B=", NULL };
	uint32_t groups[] = { 10, 20 };
	struct guest_exec_req in = {
		.argv = argv, .argc = 3, .env = env, .envc = 2, .cwd = "/work", .uid = 1000, .gid = 0,
		.groups = groups, .ngroups = 2, .timeout_ms = 1500, .flags = GUEST_EXEC_STDIN | GUEST_EXEC_NONET,
		.root = "/run/kiln/steps/s1/r",
	};
	struct guest_exec_req out;
	struct guest_wbuf w = { 0 };
	const char *why = NULL;

	guest_encode_exec(&w, 9, &in);
	CHECK(!w.failed);
	CHECK_INT(guest_get_u32(w.data + 8), w.len - GUEST_HDR_LEN);
	CHECK_INT(guest_decode_exec(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &out, &why), 0);
	CHECK_INT(out.argc, 3);
	CHECK_STR(out.argv[2], "echo 'hi there'");
	CHECK(out.argv[3] == NULL);
	CHECK_INT(out.envc, 2);
	CHECK_STR(out.env[1], "B=");
	CHECK_STR(out.cwd, "/work");
	CHECK_INT(out.uid, 1000);
	CHECK_INT(out.gid, 0);
	CHECK_INT(out.ngroups, 2);
	CHECK_INT(out.groups[1], 20);
	CHECK_INT(out.timeout_ms, 1500);
	CHECK_INT(out.flags, GUEST_EXEC_STDIN | GUEST_EXEC_NONET);
	CHECK_STR(out.root, "/run/kiln/steps/s1/r");
	guest_exec_req_free(&out);
	guest_wbuf_free(&w);

	/* Defaults: no env (NULL, not empty), uid/gid unchanged. */
	in = (struct guest_exec_req){ .argv = argv, .argc = 1, .uid = -1, .gid = -1 };
	guest_encode_exec(&w, 9, &in);
	CHECK_INT(guest_decode_exec(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &out, &why), 0);
	CHECK(out.env == NULL);
	CHECK_INT(out.uid, -1);
	CHECK(out.cwd == NULL);
	CHECK(out.root == NULL);
	guest_exec_req_free(&out);
	guest_wbuf_free(&w);

	/* An explicitly empty environment stays empty. */
	char *noenv[] = { NULL };
	in.env = noenv;
	guest_encode_exec(&w, 9, &in);
	CHECK_INT(guest_decode_exec(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &out, &why), 0);
	CHECK(out.env != NULL && out.env[0] == NULL);
	guest_exec_req_free(&out);
	guest_wbuf_free(&w);
}

static int decode_exec_raw(struct guest_wbuf *w, const char **why)
{
	struct guest_exec_req m;
	int r = guest_decode_exec(w->data, w->len, &m, why);

	if (r == 0)
		guest_exec_req_free(&m);
	w->len = 0;
	return r;
}

static void test_exec_rejects(void)
{
	struct guest_wbuf w = { 0 };
	const char *why = NULL;
	uint8_t eight[8] = { 0 };

	/* no program */
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK_STR(why, "exec without a program");
	/* NUL inside a string */
	put_tlv(&w, 1, "a\0b", 3);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK(strstr(why, "NUL") != NULL);
	/* field longer than the payload */
	put_tlv(&w, 1, "ls", 2);
	w.data[5] = 50;
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK(strstr(why, "past the end") != NULL);
	/* truncated field header */
	put_tlv(&w, 1, "ls", 2);
	guest_wbuf_put(&w, "\0\1", 2);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK_STR(why, "truncated field header");
	/* integer of the wrong size */
	put_tlv(&w, 1, "ls", 2);
	put_tlv(&w, 4, eight, 4);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	/* uid 0xffffffff means "no change" to the kernel: refused */
	put_tlv(&w, 1, "ls", 2);
	memset(eight, 0, 8);
	eight[4] = eight[5] = eight[6] = eight[7] = 0xff;
	put_tlv(&w, 4, eight, 8);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK(strstr(why, "range") != NULL);
	/* env that is not NAME=VALUE */
	memset(eight, 0, 8);
	eight[7] = 1;
	put_tlv(&w, 1, "ls", 2);
	put_tlv(&w, 7, eight, 8);
	put_tlv(&w, 2, "NOVALUE", 7);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK(strstr(why, "NAME=VALUE") != NULL);
	/* duplicate cwd */
	put_tlv(&w, 1, "ls", 2);
	put_tlv(&w, 3, "/a", 2);
	put_tlv(&w, 3, "/b", 2);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK(strstr(why, "duplicate") != NULL);
	/* too many arguments */
	for (unsigned i = 0; i <= GUEST_MAX_LIST; i++)
		put_tlv(&w, 1, "x", 1);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	CHECK(strstr(why, "too many") != NULL);
	/* unknown flags */
	put_tlv(&w, 1, "ls", 2);
	eight[7] = 0x80;
	put_tlv(&w, 9, eight, 8);
	CHECK_INT(decode_exec_raw(&w, &why), -1);
	/* unknown tags are skipped (forward compatibility) */
	put_tlv(&w, 1, "ls", 2);
	put_tlv(&w, 999, "whatever", 8);
	CHECK_INT(decode_exec_raw(&w, &why), 0);
	guest_wbuf_free(&w);
}

static void test_other_messages(void)
{
	struct guest_wbuf w = { 0 };
	const char *why = NULL;
	struct guest_hello h = { .version = 1, .caps = 0x3f, .agent = "kiln-agent 0.1.0", .pid = 1 }, h2;
	struct guest_exit ex = { .code = 0, .signal = 9, .timed_out = true }, ex2;
	struct guest_stat st = { .mode = 0120777, .uid = 5, .gid = 6, .size = 1ull << 40, .mtime_sec = -5,
				 .mtime_nsec = 999, .link = "../t" }, st2;
	struct guest_error_msg em = { .errnum = 2, .msg = "nope" }, em2;
	struct guest_xfer_req xr = { .dir = "/srv", .timeout_ms = 9 }, xr2;

	guest_encode_hello(&w, 0, &h);
	CHECK_INT(guest_decode_hello(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &h2, &why), 0);
	CHECK_INT(h2.caps, 0x3f);
	CHECK_STR(h2.agent, "kiln-agent 0.1.0");
	guest_hello_free(&h2);
	w.len = 0;
	CHECK_INT(guest_decode_hello(w.data, 0, &h2, &why), -1); /* no version */

	guest_encode_exit(&w, 3, &ex);
	CHECK_INT(guest_decode_exit(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &ex2, &why), 0);
	CHECK(ex2.signal == 9 && ex2.code == 0 && ex2.timed_out);
	w.len = 0;

	struct guest_xattr xs[2] = { { "trusted.overlay.opaque", (uint8_t *)"y", 1 },
				     { "security.capability", (uint8_t *)"\0\1\0", 3 } };
	st.xattrs = xs;
	st.nxattrs = 2;
	CHECK_INT(guest_encode_stat(&w, 3, &st), 0);
	CHECK_INT(guest_decode_stat(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &st2, &why), 0);
	CHECK_INT(st2.nxattrs, 2);
	CHECK(st2.nxattrs == 2 && st2.xattrs[1].len == 3 && memcmp(st2.xattrs[1].value, "\0\1\0", 3) == 0);
	CHECK(guest_stat_xattr(&st2, "trusted.overlay.opaque") != NULL);
	CHECK(st2.mode == 0120777 && st2.uid == 5 && st2.gid == 6 && st2.size == 1ull << 40);
	CHECK(st2.mtime_sec == -5 && st2.mtime_nsec == 999);
	CHECK_STR(st2.link, "../t");
	guest_stat_free(&st2);
	w.len = 0;

	/* A value without its name, and a name without its value, are refused. */
	{
		struct guest_wbuf b = { 0 };
		uint8_t mode[8] = { 0, 0, 0, 0, 0, 0, 0x81, 0xa4 };
		put_tlv(&b, 1, mode, 8);
		put_tlv(&b, 9, "y", 1);
		CHECK_INT(guest_decode_stat(b.data, b.len, &st2, &why), -1);
		CHECK(strstr(why, "without a name") != NULL);
		b.len = 0;
		put_tlv(&b, 1, mode, 8);
		put_tlv(&b, 8, "user.x", 6);
		CHECK_INT(guest_decode_stat(b.data, b.len, &st2, &why), -1);
		CHECK(strstr(why, "without a value") != NULL);
		guest_wbuf_free(&b);
	}

	guest_encode_error(&w, 3, &em);
	CHECK_INT(guest_decode_error(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &em2, &why), 0);
	CHECK(em2.errnum == 2);
	CHECK_STR(em2.msg, "nope");
	guest_error_msg_free(&em2);
	w.len = 0;

	guest_encode_xfer(&w, GUEST_F_UPLOAD, 3, &xr);
	CHECK_INT(w.data[2], GUEST_F_UPLOAD);
	CHECK_INT(guest_decode_xfer(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &xr2, &why), 0);
	CHECK_STR(xr2.dir, "/srv");
	CHECK_INT(xr2.timeout_ms, 9);
	guest_xfer_req_free(&xr2);
	w.len = 0;
	xr.dir = "relative";
	guest_encode_xfer(&w, GUEST_F_UPLOAD, 3, &xr);
	CHECK_INT(guest_decode_xfer(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &xr2, &why), -1);
	CHECK(strstr(why, "absolute") != NULL);
	guest_wbuf_free(&w);
}

static int decode_identity_raw(struct guest_wbuf *w, const char **why)
{
	struct guest_identity m;
	int rc = guest_decode_identity(w->data, w->len, &m, why);

	guest_identity_free(&m);
	w->len = 0;
	return rc;
}

static void test_identity(void)
{
	uint8_t seed[40], eight[8] = { 0 }, big[GUEST_MAX_ENTROPY + 1] = { 0 };
	struct guest_identity in = { .set_time = true, .time_sec = 1796000000, .time_nsec = 999999999,
				     .hostname = "0123456789ab", .entropy = seed, .entropy_len = sizeof(seed) }, out;
	struct guest_wbuf w = { 0 };
	struct guest_frame f;
	const char *why = NULL;

	for (size_t i = 0; i < sizeof(seed); i++)
		seed[i] = (uint8_t)(i * 7);
	guest_encode_identity(&w, 9, &in);
	CHECK_INT(guest_hdr_decode(w.data, &f, &why), 0);
	CHECK_INT(f.type, GUEST_F_IDENTITY);
	CHECK_INT(guest_decode_identity(w.data + GUEST_HDR_LEN, f.len, &out, &why), 0);
	CHECK(out.set_time);
	CHECK(out.time_sec == 1796000000 && out.time_nsec == 999999999);
	CHECK_STR(out.hostname, "0123456789ab");
	CHECK(out.entropy_len == sizeof(seed) && memcmp(out.entropy, seed, sizeof(seed)) == 0);
	guest_identity_free(&out);
	w.len = 0;
	/* Nothing at all is a valid (empty) identity. */
	CHECK_INT(decode_identity_raw(&w, &why), 0);
	/* seconds without nanoseconds */
	put_tlv(&w, 1, eight, 8);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK_STR(why, "time needs both seconds and nanoseconds");
	/* nanoseconds out of range */
	put_tlv(&w, 1, eight, 8);
	put_tlv(&w, 2, (uint8_t[8]){ 0, 0, 0, 0, 0x3b, 0x9a, 0xca, 0x00 }, 8);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK_STR(why, "nanoseconds out of range");
	/* empty and overlong hostnames */
	put_tlv(&w, 3, "", 0);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK_STR(why, "hostname must be 1-64 bytes");
	put_tlv(&w, 3, big, 65);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK(strstr(why, "NUL") != NULL);
	memset(big, 'h', sizeof(big));
	put_tlv(&w, 3, big, 65);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK_STR(why, "hostname must be 1-64 bytes");
	/* too much, no, or twice the entropy */
	put_tlv(&w, 4, big, sizeof(big));
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK_STR(why, "entropy must be 1-512 bytes");
	put_tlv(&w, 4, big, 0);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	put_tlv(&w, 4, big, 8);
	put_tlv(&w, 4, big, 8);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK_STR(why, "duplicate entropy field");
	/* unknown tags are skipped */
	put_tlv(&w, 99, "x", 1);
	CHECK_INT(decode_identity_raw(&w, &why), 0);
	/* eth0's MAC and address: round trip, then a multicast MAC and a bad prefix */
	struct guest_identity n = { .set_net = true, .mac = { 0x02, 1, 2, 3, 4, 5 }, .ipv4 = 0x0a000227u,
				    .prefix = 24, .gateway = 0x0a000202u };
	guest_encode_identity(&w, 3, &n);
	CHECK_INT(guest_hdr_decode(w.data, &f, &why), 0);
	CHECK_INT(guest_decode_identity(w.data + GUEST_HDR_LEN, f.len, &out, &why), 0);
	CHECK(out.set_net && memcmp(out.mac, n.mac, 6) == 0 && out.ipv4 == n.ipv4 && out.prefix == 24 &&
	      out.gateway == n.gateway && !out.set_time);
	guest_identity_free(&out);
	w.len = 0;
	uint8_t net[15] = { 0x03, 1, 2, 3, 4, 5, 10, 0, 2, 39, 24, 10, 0, 2, 2 };
	put_tlv(&w, 5, net, sizeof(net));
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	CHECK(strstr(why, "unicast MAC") != NULL);
	net[0] = 0x02;
	net[10] = 33;
	put_tlv(&w, 5, net, sizeof(net));
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	put_tlv(&w, 5, net, 14);
	CHECK_INT(decode_identity_raw(&w, &why), -1);
	guest_wbuf_free(&w);
}

/* Fields added after protocol 2 shipped: the log dir of a detached exec and
 * the one entry of a download; older peers skip them (unknown tags). */
static void test_new_fields(void)
{
	char *argv[] = { "sleep", "9", NULL };
	struct guest_exec_req in = { .argv = argv, .argc = 2, .uid = -1, .gid = -1, .flags = GUEST_EXEC_DETACH,
				     .log_dir = "/run/kiln/exec" }, out;
	struct guest_xfer_req xr = { .dir = "/etc", .name = "passwd" }, xr2;
	struct guest_wbuf w = { 0 };
	const char *why = NULL;

	guest_encode_exec(&w, 4, &in);
	CHECK_INT(guest_decode_exec(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &out, &why), 0);
	CHECK_STR(out.log_dir, "/run/kiln/exec");
	guest_exec_req_free(&out);
	w.len = 0;
	in.flags = 0; /* a log dir is for detached processes only */
	guest_encode_exec(&w, 4, &in);
	CHECK_INT(guest_decode_exec(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &out, &why), -1);
	CHECK(strstr(why, "log dir") != NULL);
	w.len = 0;
	guest_encode_xfer(&w, GUEST_F_DOWNLOAD, 5, &xr);
	CHECK_INT(guest_decode_xfer(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &xr2, &why), 0);
	CHECK_STR(xr2.name, "passwd");
	guest_xfer_req_free(&xr2);
	const char *bad[] = { "a/b", "..", ".", "" };
	for (size_t i = 0; i < 4; i++) {
		w.len = 0;
		xr.name = (char *)bad[i];
		guest_encode_xfer(&w, GUEST_F_DOWNLOAD, 5, &xr);
		CHECK_INT(guest_decode_xfer(w.data + GUEST_HDR_LEN, w.len - GUEST_HDR_LEN, &xr2, &why), -1);
	}
	guest_wbuf_free(&w);
}

int main(void)
{
	RUN(test_header);
	RUN(test_framer_split);
	RUN(test_frame_limit);
	RUN(test_exec_roundtrip);
	RUN(test_exec_rejects);
	RUN(test_other_messages);
	RUN(test_identity);
	RUN(test_new_fields);
	return test_done();
}
