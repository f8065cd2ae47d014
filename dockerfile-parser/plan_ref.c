/* plan_ref.c — is an expanded FROM / COPY --from / --mount from= image a
 * valid reference?  The grammar of distribution/reference, which BuildKit's
 * ParseNormalizedNamed applies to the stages it builds, so `FROM alpine:`
 * (an empty ARG) or `FROM Alpine` fails at plan time, at its line.
 * Transport references (oci:DIR, docker-archive:FILE, ...) pass as they are. */
#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

static bool lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* path-component: [a-z0-9]+ ((\.|_|__|-+)[a-z0-9]+)* */
static bool path_component(const char *s, size_t n)
{
	size_t i = 0;

	if (n == 0 || !lower_alnum(s[0]) || !lower_alnum(s[n - 1]))
		return false;
	while (i < n) {
		if (lower_alnum(s[i])) {
			i++;
			continue;
		}
		if (s[i] == '.' || (s[i] == '_' && !(i + 1 < n && s[i + 1] == '_'))) {
			i++;
		} else if (s[i] == '_') {
			i += 2;
		} else if (s[i] == '-') {
			while (i < n && s[i] == '-')
				i++;
		} else {
			return false;
		}
		if (i >= n || !lower_alnum(s[i]))
			return false;
	}
	return true;
}

/* host[:port], host = dns labels (letters, digits, inner '-') or [ipv6] */
static bool domain(const char *s, size_t n)
{
	size_t i = 0, start;

	if (n && s[0] == '[') {
		while (i < n && s[i] != ']') {
			if (!isxdigit((unsigned char)s[i]) && s[i] != ':' && s[i] != '[')
				return false;
			i++;
		}
		if (i >= n)
			return false;
		i++;
	} else {
		do {
			start = i;
			while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '-'))
				i++;
			if (i == start || s[start] == '-' || s[i - 1] == '-')
				return false;
		} while (i < n && s[i] == '.' && ++i);
	}
	if (i < n && s[i] == ':') {
		start = ++i;
		while (i < n && isdigit((unsigned char)s[i]))
			i++;
		if (i == start)
			return false;
	}
	return i == n;
}

static bool tag_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || !(isalnum((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
			return false;
	return true;
}

/* algorithm ":" hex, algorithm = [a-z0-9]+ ([+._-][a-z0-9]+)*, hex >= 32 */
static bool digest_ok(const char *s)
{
	const char *colon = strchr(s, ':');
	size_t hex = 0;

	if (!colon || colon == s || !lower_alnum(s[0]) || !lower_alnum(colon[-1]))
		return false;
	for (const char *p = s; p < colon; p++)
		if (!lower_alnum(*p) && !(strchr("+._-", *p) && lower_alnum(p[1])))
			return false;
	for (const char *p = colon + 1; *p; p++, hex++)
		if (!isxdigit((unsigned char)*p))
			return false;
	return hex >= 32;
}

/* kiln (like buildah and skopeo) also takes containers-image transports:
 * their location syntax is the transport's business (rootfs/builder). */
static bool transport_ref(const char *ref)
{
	static const char *const transports[] = { "oci:", "oci-archive:", "docker-archive:", "dir:",
						  "containers-storage:", "docker-daemon:", "tarball:", "sif:", NULL };
	for (size_t i = 0; transports[i]; i++)
		if (!strncmp(ref, transports[i], strlen(transports[i])))
			return true;
	return false;
}

int dfp_check_reference(const char *ref, char **why)
{
	char *dup, *at, *name, *slash, *colon;
	const char *msg = NULL;
	size_t remote_start = 0;

	if (transport_ref(ref))
		return 0;
	if (!strncmp(ref, "docker://", 9))
		ref += 9;
	dup = kiln_xstrdup(ref);
	name = dup;

	at = strchr(dup, '@');
	if (at) {
		*at = '\0';
		if (!digest_ok(at + 1))
			msg = "invalid reference format";
	}
	/* a tag is after the last ':' that follows the last '/' */
	slash = strrchr(name, '/');
	colon = strrchr(slash ? slash : name, ':');
	if (!msg && colon) {
		*colon = '\0';
		if (!tag_ok(colon + 1))
			msg = "invalid reference format";
	}
	slash = strchr(name, '/');
	if (!msg && slash) {
		size_t dl = (size_t)(slash - name);
		bool has_upper = false;
		for (size_t i = 0; i < dl; i++)
			has_upper |= isupper((unsigned char)name[i]) != 0;
		/* the first component is a registry only if it looks like one */
		if (memchr(name, '.', dl) || memchr(name, ':', dl) || (dl == 9 && !strncmp(name, "localhost", 9)) ||
		    has_upper) {
			if (!domain(name, dl))
				msg = "invalid reference format";
			remote_start = dl + 1;
		}
	}
	if (!msg && strlen(name) > 255)
		msg = "invalid reference format: repository name must not be more than 255 characters";
	for (const char *p = name + remote_start; !msg; p = slash + 1) {
		slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (!path_component(p, n)) {
			bool upper = false;
			for (size_t i = 0; i < n; i++)
				upper |= isupper((unsigned char)p[i]) != 0;
			msg = upper ? "invalid reference format: repository name must be lowercase"
				    : "invalid reference format";
		}
		if (!slash)
			break;
	}
	free(dup);
	if (msg) {
		*why = kiln_xstrdup(msg);
		return -1;
	}
	return 0;
}

int dfp_require_reference(const struct dfp_ctx *c, const struct df_node *n, const char *ref, kiln_error **err)
{
	char *why = NULL;

	if (dfp_check_reference(ref, &why) == 0)
		return 0;
	dfp_fail(c, n, err, "failed to parse stage name \"%s\": %s", ref, why);
	free(why);
	return -1;
}
