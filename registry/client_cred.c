/* client_cred.c — registry credentials: `kiln login` writes them to
 * $KILN_HOME/auth.json (0600, docker's config.json shape), lookups also read
 * the files podman/skopeo and docker use.  Base64 through openssl. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "registry/internal.h"

char *reg_auth_path(void)
{
	char *home = kiln_home(), *p = kiln_path_join(home, "auth.json");
	free(home);
	return p;
}

static char *b64_encode(const char *s)
{
	size_t n = strlen(s);
	char *out = kiln_xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
	return out;
}

/* NULL when s is not base64. */
static char *b64_decode(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n % 4 != 0)
		return NULL;
	char *out = kiln_xmalloc(n / 4 * 3 + 1);
	int len = EVP_DecodeBlock((unsigned char *)out, (const unsigned char *)s, (int)n);
	if (len < 0) {
		free(out);
		return NULL;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes */
	for (size_t i = n; i > 0 && s[i - 1] == '='; i--)
		len--;
	out[len] = 0;
	return out;
}

/* "https://index.docker.io/v1/" → "index.docker.io": the key's host part. */
static char *key_host(const char *key)
{
	const char *p = strstr(key, "://");
	p = p ? p + 3 : key;
	return kiln_xstrndup(p, strcspn(p, "/"));
}

static int is_hub(const char *h)
{
	return strcmp(h, "docker.io") == 0 || strcmp(h, "index.docker.io") == 0 ||
	       strcmp(h, "registry-1.docker.io") == 0;
}

static int host_match(const char *key, const char *host)
{
	char *h = key_host(key);
	int m = strcmp(h, host) == 0 || (is_hub(h) && is_hub(host));
	free(h);
	return m;
}

/* Look in one file: 1 found, 0 not (missing or unreadable files are skipped
 * with a warning; they are other tools' files). */
static int lookup_in(const char *path, const char *host, char **user, char **pass)
{
	kiln_error *e = NULL;
	json_t *j, *auths, *v;
	const char *key;
	int found = 0;

	if (access(path, F_OK) != 0)
		return 0;
	j = kiln_json_load_file(path, &e);
	if (!j) {
		kiln_warn("registry credentials: skipping %s: %s", path, kiln_error_message(e));
		kiln_error_free(e);
		return 0;
	}
	auths = json_object_get(j, "auths");
	json_object_foreach(auths, key, v) {
		if (!host_match(key, host))
			continue;
		const char *a = kiln_json_str(v, "auth"), *u = kiln_json_str(v, "username"),
			   *p = kiln_json_str(v, "password");
		if (a && *a) {
			char *dec = b64_decode(a), *colon = dec ? strchr(dec, ':') : NULL;
			if (!colon) {
				kiln_warn("registry credentials: %s: entry \"%s\" is not base64 of USER:PASSWORD", path,
					  key);
				free(dec);
				continue;
			}
			*colon = 0;
			*user = kiln_xstrdup(dec);
			*pass = kiln_xstrdup(colon + 1);
			free(dec);
		} else if (u && p) {
			*user = kiln_xstrdup(u);
			*pass = kiln_xstrdup(p);
		} else {
			continue;
		}
		found = 1;
		/* an exact key wins over a Docker Hub alias */
		if (strcmp(key, host) == 0)
			break;
	}
	json_decref(j);
	return found;
}

int reg_auth_lookup(const char *host, char **user, char **pass, kiln_error **err)
{
	const char *env;
	char *p;
	int found;

	*user = *pass = NULL;
	p = reg_auth_path();
	found = lookup_in(p, host, user, pass);
	free(p);
	if (!found && (env = getenv("REGISTRY_AUTH_FILE")) && *env)
		found = lookup_in(env, host, user, pass);
	if (!found && (env = getenv("XDG_RUNTIME_DIR")) && *env) {
		p = kiln_xasprintf("%s/containers/auth.json", env);
		found = lookup_in(p, host, user, pass);
		free(p);
	}
	if (!found && (env = getenv("HOME")) && *env) {
		p = kiln_xasprintf("%s/.docker/config.json", env);
		found = lookup_in(p, host, user, pass);
		free(p);
	}
	return found;
}

/* Read-modify-write of kiln's file under an exclusive lock: fn edits auths. */
static int update(const char *host, const char *user, const char *pass, kiln_error **err)
{
	char *home = kiln_home(), *path = reg_auth_path(), *lock = kiln_xasprintf("%s.lock", path), *text = NULL;
	json_t *j = NULL, *auths;
	int fd = -1, rc = -1;

	if (kiln_mkdir_p(home, 0755, err) < 0)
		goto out;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		kiln_err_errno(err, errno, "lock %s", lock);
		goto out;
	}
	if (access(path, F_OK) == 0) {
		j = kiln_json_load_file(path, err);
		if (!j)
			goto out;
	} else {
		j = json_object();
	}
	auths = json_object_get(j, "auths");
	if (!json_is_object(auths)) {
		auths = json_object();
		json_object_set_new(j, "auths", auths);
	}
	if (user) {
		char *up = kiln_xasprintf("%s:%s", user, pass), *b = b64_encode(up);
		json_object_set_new(auths, host, json_pack("{s:s}", "auth", b));
		free(up);
		free(b);
	} else {
		int removed = 0;
		const char *key;
		json_t *v;
		void *tmp;
		json_object_foreach_safe(auths, tmp, key, v) {
			char *h = key_host(key);
			if (strcmp(h, host) == 0) {
				json_object_del(auths, key);
				removed = 1;
			}
			free(h);
		}
		if (!removed) {
			kiln_err(err, KILN_E_NOTFOUND, "not logged in to %s (no entry in %s)", host, path);
			goto out;
		}
	}
	text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	kiln_buf b = KILN_BUF_INIT;
	kiln_buf_adds(&b, text);
	kiln_buf_addc(&b, '\n');
	rc = kiln_write_atomic(path, b.buf, b.len, 0600, err);
	kiln_buf_free(&b);
out:
	if (fd >= 0)
		close(fd);
	json_decref(j);
	free(text);
	free(home);
	free(path);
	free(lock);
	return rc;
}

int reg_auth_store(const char *host, const char *user, const char *pass, kiln_error **err)
{
	if (strchr(user, ':'))
		return kiln_err(err, KILN_E_INVALID, "user name \"%s\" must not contain ':'", user);
	return update(host, user, pass, err);
}

int reg_auth_remove(const char *host, kiln_error **err)
{
	return update(host, NULL, NULL, err);
}
