/* client_ref.c — image references as docker spells them
 * ("[HOST[:PORT]/]REPO[:TAG][@DIGEST]", Docker Hub defaults) and the choice
 * of plain HTTP (loopback, $KILN_INSECURE_REGISTRIES) or HTTPS per host. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

#define HUB_HOST "registry-1.docker.io"

void reg_imgref_free(struct reg_imgref *r)
{
	if (!r)
		return;
	free(r->host);
	free(r->repo);
	free(r->tag);
	free(r->digest);
	memset(r, 0, sizeof(*r));
}

/* The first component names a host the way docker decides it. */
static int looks_like_host(const char *s, size_t n)
{
	if (n == 9 && strncmp(s, "localhost", 9) == 0)
		return 1;
	return memchr(s, '.', n) || memchr(s, ':', n) || (n && s[0] == '[');
}

int reg_imgref_has_host(const char *s)
{
	const char *slash = strchr(s, '/');
	return slash && looks_like_host(s, (size_t)(slash - s));
}

static int host_valid(const char *h, const char **why)
{
	const char *port = NULL;

	if (h[0] == '[') {
		const char *end = strchr(h, ']');
		if (!end || end == h + 1) {
			*why = "unterminated IPv6 address";
			return 0;
		}
		for (const char *p = h + 1; p < end; p++)
			if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') {
				*why = "bad character in IPv6 address";
				return 0;
			}
		if (end[1] && end[1] != ':') {
			*why = "junk after IPv6 address";
			return 0;
		}
		port = end[1] ? end + 1 : NULL;
	} else {
		const char *p = h;
		for (; *p && *p != ':'; p++)
			if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-') {
				*why = "bad character in host name";
				return 0;
			}
		if (p == h || h[0] == '.' || h[0] == '-' || p[-1] == '.' || p[-1] == '-') {
			*why = "bad host name";
			return 0;
		}
		port = *p ? p : NULL;
	}
	if (port) {
		char *end;
		long v = strtol(port + 1, &end, 10);
		if (!isdigit((unsigned char)port[1]) || *end || v < 1 || v > 65535) {
			*why = "bad port";
			return 0;
		}
	}
	return 1;
}

int reg_imgref_parse(const char *s, struct reg_imgref *r, kiln_error **err)
{
	char *name = NULL;
	const char *at, *rest, *slash, *colon, *why = NULL;
	size_t off = 0;

	memset(r, 0, sizeof(*r));
	if (!s || !*s)
		return kiln_err(err, KILN_E_INVALID, "empty image reference");
	for (const char *p = s; *p; p++)
		if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
			return kiln_err(err, KILN_E_INVALID, "image reference \"%s\": white space or control character at offset %zu",
					s, (size_t)(p - s));
	at = strchr(s, '@');
	if (at) {
		kiln_error *e = NULL;
		if (kiln_digest_parse(at + 1, NULL, &e) < 0) {
			kiln_err(err, KILN_E_INVALID, "image reference \"%s\": bad digest after '@' (offset %zu): %s", s,
				 (size_t)(at - s) + 1, kiln_error_message(e));
			kiln_error_free(e);
			goto fail;
		}
		r->digest = kiln_xstrdup(at + 1);
		name = kiln_xstrndup(s, (size_t)(at - s));
	} else {
		name = kiln_xstrdup(s);
	}
	slash = strchr(name, '/');
	if (slash && looks_like_host(name, (size_t)(slash - name))) {
		r->host = kiln_xstrndup(name, (size_t)(slash - name));
		if (!host_valid(r->host, &why)) {
			kiln_err(err, KILN_E_INVALID, "image reference \"%s\": registry host \"%s\": %s", s, r->host, why);
			goto fail;
		}
		off = (size_t)(slash - name) + 1;
	}
	rest = name + off;
	slash = strrchr(rest, '/');
	colon = strrchr(slash ? slash : rest, ':');
	if (colon) {
		r->tag = kiln_xstrdup(colon + 1);
		if (!reg_tag_valid(r->tag)) {
			kiln_err(err, KILN_E_INVALID,
				 "image reference \"%s\": bad tag \"%s\" at offset %zu (want [A-Za-z0-9_][A-Za-z0-9._-]{0,127})",
				 s, r->tag, (size_t)(colon - name) + 1);
			goto fail;
		}
		r->repo = kiln_xstrndup(rest, (size_t)(colon - rest));
	} else {
		r->repo = kiln_xstrdup(rest);
	}
	if (!r->host || strcmp(r->host, "docker.io") == 0 || strcmp(r->host, "index.docker.io") == 0) {
		free(r->host);
		r->host = kiln_xstrdup(HUB_HOST);
		if (*r->repo && !strchr(r->repo, '/')) {
			char *lib = kiln_xasprintf("library/%s", r->repo);
			free(r->repo);
			r->repo = lib;
		}
	}
	if (!*r->repo) {
		kiln_err(err, KILN_E_INVALID, "image reference \"%s\": no repository name", s);
		goto fail;
	}
	if (!reg_name_valid(r->repo)) {
		const char *p = r->repo;
		while (*p && (islower((unsigned char)*p) || isdigit((unsigned char)*p) || strchr("._-/", *p)))
			p++;
		if (*p)
			kiln_err(err, KILN_E_INVALID,
				 "image reference \"%s\": bad repository name \"%s\": '%c' is not allowed "
				 "(lowercase letters, digits, '.', '_', '-', '/')",
				 s, r->repo, *p);
		else
			kiln_err(err, KILN_E_INVALID,
				 "image reference \"%s\": bad repository name \"%s\" (components of [a-z0-9] "
				 "separated by '.', '_', '__', '-' or '/')",
				 s, r->repo);
		goto fail;
	}
	if (!r->tag && !r->digest)
		r->tag = kiln_xstrdup("latest");
	free(name);
	return 0;
fail:
	free(name);
	reg_imgref_free(r);
	return -1;
}

char *reg_imgref_str(const struct reg_imgref *r)
{
	return kiln_xasprintf("%s/%s%s%s%s%s", r->host, r->repo, r->tag ? ":" : "", r->tag ? r->tag : "",
			      r->digest ? "@" : "", r->digest ? r->digest : "");
}

const char *reg_imgref_reference(const struct reg_imgref *r)
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

int reg_host_insecure(const char *host)
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
