/* ref.c — the one reference syntax of every kiln command and of FROM, as
 * docker spells it: "[HOST[:PORT]/]NAME[:TAG][@DIGEST]" (a first component is
 * a host when it has a '.' or ':' or is "localhost"); the OCI grammars of
 * repository names and tags.  The registry client adds Docker Hub's defaults,
 * the template and image stores name things by kiln_ref_str(). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static int lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* component := [a-z0-9]+ ((\.|_|__|-+) [a-z0-9]+)* ; name := component (/ component)* */
int kiln_ref_name_valid(const char *name)
{
	size_t len = strlen(name);
	const char *p = name;

	if (len == 0 || len > 255)
		return 0;
	for (;;) {
		if (!lower_alnum(*p))
			return 0;
		while (lower_alnum(*p))
			p++;
		if (*p == '\0')
			return 1;
		if (*p == '/') {
			p++;
			continue;
		}
		if (*p == '.') {
			p++;
		} else if (*p == '_') {
			p += p[1] == '_' ? 2 : 1;
		} else if (*p == '-') {
			while (*p == '-')
				p++;
		} else {
			return 0;
		}
		if (!lower_alnum(*p))
			return 0;
	}
}

static int tag_char(char c, int first)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
		return 1;
	return !first && (c == '.' || c == '-');
}

int kiln_ref_tag_valid(const char *tag)
{
	size_t i;

	for (i = 0; tag[i]; i++)
		if (i >= 128 || !tag_char(tag[i], i == 0))
			return 0;
	return i > 0;
}

void kiln_ref_free(struct kiln_ref *r)
{
	if (!r)
		return;
	free(r->host);
	free(r->name);
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

int kiln_ref_has_host(const char *s)
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

int kiln_ref_parse(const char *s, struct kiln_ref *r, kiln_error **err)
{
	char *name = NULL;
	const char *at, *rest, *slash, *colon, *why = NULL;
	size_t off = 0;

	memset(r, 0, sizeof(*r));
	if (!s || !*s)
		return kiln_err(err, KILN_E_INVALID, "empty reference");
	for (const char *p = s; *p; p++)
		if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
			return kiln_err(err, KILN_E_INVALID, "reference \"%s\": white space or control character at offset %zu",
					s, (size_t)(p - s));
	at = strchr(s, '@');
	if (at) {
		kiln_error *e = NULL;
		if (kiln_digest_parse(at + 1, NULL, &e) < 0) {
			kiln_err(err, KILN_E_INVALID, "reference \"%s\": bad digest after '@' (offset %zu): %s", s,
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
			kiln_err(err, KILN_E_INVALID, "reference \"%s\": registry host \"%s\": %s", s, r->host, why);
			goto fail;
		}
		off = (size_t)(slash - name) + 1;
	}
	rest = name + off;
	slash = strrchr(rest, '/');
	colon = strrchr(slash ? slash : rest, ':');
	if (colon) {
		r->tag = kiln_xstrdup(colon + 1);
		if (!kiln_ref_tag_valid(r->tag)) {
			kiln_err(err, KILN_E_INVALID,
				 "reference \"%s\": bad tag \"%s\" at offset %zu (want [A-Za-z0-9_][A-Za-z0-9._-]{0,127})",
				 s, r->tag, (size_t)(colon - name) + 1);
			goto fail;
		}
		r->name = kiln_xstrndup(rest, (size_t)(colon - rest));
	} else {
		r->name = kiln_xstrdup(rest);
	}
	if (!*r->name) {
		kiln_err(err, KILN_E_INVALID, "reference \"%s\": no repository name", s);
		goto fail;
	}
	if (!kiln_ref_name_valid(r->name)) {
		const char *p = r->name;
		while (*p && (islower((unsigned char)*p) || isdigit((unsigned char)*p) || strchr("._-/", *p)))
			p++;
		if (*p)
			kiln_err(err, KILN_E_INVALID,
				 "reference \"%s\": bad repository name \"%s\": '%c' is not allowed "
				 "(lowercase letters, digits, '.', '_', '-', '/')",
				 s, r->name, *p);
		else
			kiln_err(err, KILN_E_INVALID,
				 "reference \"%s\": bad repository name \"%s\" (components of [a-z0-9] "
				 "separated by '.', '_', '__', '-' or '/')",
				 s, r->name);
		goto fail;
	}
	if (!r->tag && !r->digest)
		r->tag = kiln_xstrdup("latest");
	free(name);
	return 0;
fail:
	free(name);
	kiln_ref_free(r);
	return -1;
}

char *kiln_ref_repo(const struct kiln_ref *r)
{
	return r->host ? kiln_xasprintf("%s/%s", r->host, r->name) : kiln_xstrdup(r->name);
}

char *kiln_ref_str(const struct kiln_ref *r)
{
	char *repo = kiln_ref_repo(r), *s;

	s = kiln_xasprintf("%s%s%s", repo, r->digest ? "@" : ":", r->digest ? r->digest : r->tag);
	free(repo);
	return s;
}

char *kiln_ref_normalize(const char *s, kiln_error **err)
{
	struct kiln_ref r;
	char *out;

	if (kiln_ref_parse(s, &r, err) < 0)
		return NULL;
	out = kiln_ref_str(&r);
	kiln_ref_free(&r);
	return out;
}
