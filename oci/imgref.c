/* imgref.c — where a reference (common/ref.c, the one parser) is fetched
 * from: Docker Hub's defaults for references without a host, and the choice
 * of plain HTTP (loopback, $KILN_INSECURE_REGISTRIES) or HTTPS per host. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "oci/oci.h"

#define HUB_HOST "registry-1.docker.io"

void oci_imgref_free(struct oci_imgref *r)
{
	if (!r)
		return;
	free(r->host);
	free(r->repo);
	free(r->tag);
	free(r->digest);
	memset(r, 0, sizeof(*r));
}

int oci_imgref_parse(const char *s, struct oci_imgref *r, kiln_error **err)
{
	struct kiln_ref k;

	memset(r, 0, sizeof(*r));
	if (kiln_ref_parse(s, &k, err) < 0)
		return -1;
	r->tag = k.tag;
	r->digest = k.digest;
	if (!k.host || strcmp(k.host, "docker.io") == 0 || strcmp(k.host, "index.docker.io") == 0) {
		free(k.host);
		r->host = kiln_xstrdup(HUB_HOST);
		if (!strchr(k.name, '/')) {
			r->repo = kiln_xasprintf("library/%s", k.name);
			free(k.name);
		} else {
			r->repo = k.name;
		}
	} else {
		r->host = k.host;
		r->repo = k.name;
	}
	return 0;
}

char *oci_imgref_str(const struct oci_imgref *r)
{
	return kiln_xasprintf("%s/%s%s%s%s%s", r->host, r->repo, r->tag ? ":" : "", r->tag ? r->tag : "",
			      r->digest ? "@" : "", r->digest ? r->digest : "");
}

const char *oci_imgref_reference(const struct oci_imgref *r)
{
	return r->digest ? r->digest : r->tag ? r->tag : "latest";
}

/* HOST without its port ("[::1]:5000" → "::1"), into buf. */
static void host_only(const char *host, char *buf, size_t n)
{
	if (host[0] == '[') {
		const char *end = strchr(host, ']');
		size_t l = end ? (size_t)(end - host - 1) : strlen(host + 1);
		snprintf(buf, n, "%.*s", (int)l, host + 1);
		return;
	}
	const char *colon = strchr(host, ':');
	snprintf(buf, n, "%.*s", (int)(colon ? (size_t)(colon - host) : strlen(host)), host);
}

int oci_host_insecure(const char *host)
{
	char h[256];
	const char *list = getenv("KILN_INSECURE_REGISTRIES");

	host_only(host, h, sizeof(h));
	if (strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0 || strncmp(h, "127.", 4) == 0)
		return 1;
	while (list && *list) {
		const char *end = strchr(list, ',');
		size_t l = end ? (size_t)(end - list) : strlen(list);
		while (l && isspace((unsigned char)*list))
			list++, l--;
		while (l && isspace((unsigned char)list[l - 1]))
			l--;
		if (l && ((strlen(host) == l && strncmp(host, list, l) == 0) || (strlen(h) == l && strncmp(h, list, l) == 0)))
			return 1;
		list = end ? end + 1 : NULL;
	}
	return 0;
}
