/* team.c — a team's place on the build server: its directories and context
 * store, the registry host its builds push to and its credential there (a
 * token made once per server start), and the checks of the names and
 * digests a request gives; what every other file of service/ stands on. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/internal.h"

char *svc_team_dir(svc *s, const char *team, const char *sub)
{
	char *t = kiln_xasprintf("teams/%s/%s", team, sub);
	char *p = kiln_path_join(s->state_dir, t);

	free(t);
	return p;
}

int svc_team_cas(svc *s, const char *team, kiln_cas **out, kiln_error **err)
{
	static const struct kiln_cas_layout lay = { .fanout = true, .mode = 0444, .sync = KILN_CAS_SYNC_FULL };
	char *root = svc_team_dir(s, team, "context");
	int ret = kiln_mkdir_p(root, 0700, err) < 0 ? -1 : kiln_cas_open(root, &lay, out, err);

	free(root);
	return ret;
}

bool svc_digest_ok(const char *d)
{
	enum kiln_digest_algo algo;
	kiln_error *err = NULL;
	int ok = d && strncmp(d, "sha256:", 7) == 0 && kiln_digest_parse(d, &algo, &err) == 0;

	kiln_error_free(err);
	return ok;
}

/* A context path must stay inside: relative, no "..", no empty parts. */
int svc_path_ok(const char *p)
{
	if (p == NULL || *p == '\0' || *p == '/' || strlen(p) > 4096)
		return 0;
	for (const char *s = p; *s;) {
		size_t n = strcspn(s, "/");
		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return 0;
		s += n + (s[n] == '/');
	}
	return 1;
}

reg_server *svc_registry(const svc *s)
{
	return s->srv;
}

char *svc_registry_host(svc *s)
{
	const struct reg_config *c = reg_server_config(s->srv);
	const char *h = strcmp(c->host, "0.0.0.0") == 0 || strcmp(c->host, "::") == 0 ? "127.0.0.1" : c->host;

	return kiln_xasprintf(strchr(h, ':') ? "[%s]:%u" : "%s:%u", h, reg_server_port(s->srv));
}

int svc_tag_holds(svc *s, const char *ref, const char *digest, kiln_error **err)
{
	char *repo, *colon, d[KILN_DIGEST_MAX];
	int rc;

	if (ref == NULL || digest == NULL || (colon = strrchr(ref, ':')) == NULL || strchr(colon, '/'))
		return 0;
	repo = kiln_xstrndup(ref, (size_t)(colon - ref));
	rc = reg_server_resolve(s->srv, repo, colon + 1, d, err);
	free(repo);
	return rc <= 0 ? rc : strcmp(d, digest) == 0;
}

/* The team's credential for its builds' pulls and pushes: a token limited
 * to TEAM:pull,push, so a build pulls bases only from its own namespace or
 * public repositories. */
int svc_team_auth(svc *s, const char *team, const char *home, kiln_error **err)
{
	const struct reg_config *rc = reg_server_config(s->srv);
	char *path = kiln_home_path(home, KILN_PATH_AUTH, NULL), *label = NULL, *secret = NULL, *host = NULL, *user = NULL;
	char *scope = NULL;
	char *b64 = NULL;
	json_t *j = NULL;
	int ret = -1;

	if (!rc->auth) {
		ret = 0;
		goto out;
	}
	pthread_mutex_lock(&s->lock);
	/* made once per server start: a new secret, the old token revoked */
	label = kiln_xasprintf("kiln-build-%s@%s", team, s->host_id);
	for (size_t i = 0; i < s->teams_authed.n; i++)
		if (strcmp(s->teams_authed.v[i], team) == 0) {
			pthread_mutex_unlock(&s->lock);
			ret = 0;
			goto out;
		}
	scope = kiln_xasprintf("%s:pull,push", team);
	const char *scopes[] = { scope, NULL };
	kiln_error *e = NULL;
	if (reg_token_revoke(rc, label, &e) < 0)
		kiln_error_free(e);
	if (reg_token_create(rc, label, scopes, 0, &secret, err) < 0) {
		pthread_mutex_unlock(&s->lock);
		goto out;
	}
	host = svc_registry_host(s);
	user = kiln_xasprintf("kiln-build:%s", secret);
	b64 = kiln_b64_encode(user);
	j = json_pack("{s:{s:{s:s}}}", "auths", host, "auth", b64);
	char *text = json_dumps(j, JSON_INDENT(1));
	ret = kiln_write_atomic(path, text, strlen(text), 0600, err);
	free(text);
	if (ret == 0)
		kiln_strv_push(&s->teams_authed, team);
	pthread_mutex_unlock(&s->lock);
out:
	json_decref(j);
	free(b64);
	free(user);
	free(host);
	free(scope);
	if (secret)
		memset(secret, 0, strlen(secret));
	free(secret);
	free(label);
	free(path);
	return ret;
}

/* A file of a build's scratch directory or of a context directory being
 * made: removed after the build, or renamed into place with its directory
 * (which a start after a crash removes), so not worth kiln_write_atomic's
 * fsyncs. */
int svc_write_scratch(const char *path, const char *text, kiln_error **err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		return kiln_err_errno(err, errno, "create %s", path);
	if (kiln_write_full(fd, text, strlen(text)) < 0) {
		kiln_err_errno(err, errno, "write %s", path);
		close(fd);
		return -1;
	}
	return close(fd) < 0 ? kiln_err_errno(err, errno, "write %s", path) : 0;
}
