/* fuzz_client_input.c — what a registry client reads from outside: image
 * references (from users, Dockerfiles) and WWW-Authenticate challenges (from
 * servers).  Parsers must never crash or leak; an accepted reference must be
 * valid in every part and survive a round trip through oci_imgref_str. */
#include <stdlib.h>
#include <string.h>

#include "regclient/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = kiln_xstrndup((const char *)data, size);
	kiln_error *err = NULL;
	struct oci_imgref r, again;
	struct rc_challenge ch;

	if (oci_imgref_parse(s, &r, &err) == 0) {
		if (!r.host || !*r.host || !oci_name_valid(r.repo) || (r.tag && !oci_tag_valid(r.tag)) ||
		    (!r.tag && !r.digest) || (r.digest && kiln_digest_parse(r.digest, NULL, NULL) < 0))
			__builtin_trap();
		char *f = oci_imgref_str(&r);
		if (oci_imgref_parse(f, &again, &err) < 0 || !same(r.host, again.host) || !same(r.repo, again.repo) ||
		    !same(r.tag, again.tag) || !same(r.digest, again.digest))
			__builtin_trap();
		oci_imgref_free(&again);
		oci_host_insecure(r.host);
		free(f);
		oci_imgref_free(&r);
	} else {
		if (!err || !kiln_error_message(err)[0])
			__builtin_trap();
		kiln_error_clear(&err);
	}
	if (rc_challenge_parse(s, &ch, &err) == 0) {
		if (!ch.scheme || !*ch.scheme)
			__builtin_trap();
		rc_challenge_free(&ch);
	} else {
		if (!err)
			__builtin_trap();
		kiln_error_clear(&err);
	}
	free(s);
	return 0;
}
