/* cred.c — registry credentials: `kiln login` writes them to
 * $KILN_HOME/auth.json (0600, docker's config.json shape), lookups also read
 * the files podman/skopeo and docker use, including their credential helper
 * programs (credHelpers, credsStore). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
extern char **environ;

#define HELPER_TIMEOUT_MS 30000


#include "regclient/internal.h"

char *rc_auth_path(void)
{
	return kiln_home_path(NULL, KILN_PATH_AUTH, NULL);
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

/* Write all of s to fd without dying of SIGPIPE if the reader is gone. */
static void write_quiet(int fd, const char *s)
{
	sigset_t pipe_set, old;
	struct timespec zero = { 0, 0 };

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	(void)kiln_write_full(fd, s, strlen(s));
	while (sigtimedwait(&pipe_set, NULL, &zero) > 0)
		; /* consume a SIGPIPE raised meanwhile */
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* `docker-credential-NAME get` with HOST on stdin answers
 * {"Username":…,"Secret":…}; a non-zero exit means "none".  Bounded in time
 * and size; the helper's stderr is discarded. */
static int helper_get(const char *name, const char *host, char **user, char **pass)
{
	char *prog = NULL, *argv[3] = { NULL, "get", NULL };
	posix_spawn_file_actions_t fa;
	kiln_buf out = KILN_BUF_INIT;
	int in[2] = { -1, -1 }, from[2] = { -1, -1 }, st = 0, found = 0;
	pid_t pid = -1;

	for (const char *p = name; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("._-", *p)) {
			kiln_warn("registry credentials: bad credential helper name \"%s\"", name);
			return 0;
		}
	prog = kiln_xasprintf("docker-credential-%s", name);
	argv[0] = prog;
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
		goto out;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, from[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	int sr = posix_spawnp(&pid, prog, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(from[1]);
	in[0] = from[1] = -1;
	if (sr != 0) {
		kiln_warn("registry credentials: cannot run %s: %s", prog, strerror(sr));
		pid = -1;
		goto out;
	}
	write_quiet(in[1], host);
	close(in[1]);
	in[1] = -1;
	for (;;) {
		struct pollfd pf = { .fd = from[0], .events = POLLIN };
		char buf[4096];
		int pr = poll(&pf, 1, HELPER_TIMEOUT_MS);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			kiln_warn("registry credentials: %s did not answer in %d s", prog, HELPER_TIMEOUT_MS / 1000);
			kill(pid, SIGKILL);
			break;
		}
		ssize_t n = read(from[0], buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (out.len < 65536)
			kiln_buf_add(&out, buf, (size_t)n);
	}
	kiln_waitpid(pid, &st, 0);
	pid = -1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		json_t *j = json_loadb(out.buf, out.len, 0, NULL);
		const char *u = kiln_json_str(j, "Username"), *sec = kiln_json_str(j, "Secret");
		if (u && sec && *sec) {
			*user = kiln_xstrdup(u);
			*pass = kiln_xstrdup(sec);
			found = 1;
		} else {
			kiln_warn("registry credentials: %s answered without Username and Secret", prog);
		}
		json_decref(j);
	}
out:
	if (pid > 0) {
		kill(pid, SIGKILL);
		kiln_waitpid(pid, NULL, 0);
	}
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (from[i] >= 0)
			close(from[i]);
	}
	if (out.len)
		memset(out.buf, 0, out.len);
	kiln_buf_free(&out);
	free(prog);
	return found;
}

/* A credential helper the file names for host: credHelpers, then credsStore. */
static int lookup_helper(json_t *j, const char *host, char **user, char **pass)
{
	const char *key;
	json_t *v;

	json_object_foreach(json_object_get(j, "credHelpers"), key, v)
		if (json_is_string(v) && host_match(key, host))
			return helper_get(json_string_value(v), key, user, pass);
	const char *store = kiln_json_str(j, "credsStore");
	if (store && *store) {
		/* docker keys Docker Hub as its legacy URL in the helpers too */
		const char *as = is_hub(host) ? "https://index.docker.io/v1/" : host;
		return helper_get(store, as, user, pass);
	}
	return 0;
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
	if (lookup_helper(j, host, user, pass)) {
		json_decref(j);
		return 1;
	}
	auths = json_object_get(j, "auths");
	json_object_foreach(auths, key, v) {
		if (!host_match(key, host))
			continue;
		const char *a = kiln_json_str(v, "auth"), *u = kiln_json_str(v, "username"),
			   *p = kiln_json_str(v, "password");
		if (a && *a) {
			char *dec = kiln_b64_decode(a), *colon = dec ? strchr(dec, ':') : NULL;
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

int rc_auth_lookup(const char *host, char **user, char **pass, kiln_error **err)
{
	const char *env;
	char *p;
	int found;

	*user = *pass = NULL;
	p = rc_auth_path();
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
	char *home = kiln_home(), *path = rc_auth_path(), *lock = kiln_xasprintf("%s.lock", path), *text = NULL;
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
		char *up = kiln_xasprintf("%s:%s", user, pass), *b = kiln_b64_encode(up);
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

int rc_auth_store(const char *host, const char *user, const char *pass, kiln_error **err)
{
	if (strchr(user, ':'))
		return kiln_err(err, KILN_E_INVALID, "user name \"%s\" must not contain ':'", user);
	return update(host, user, pass, err);
}

int rc_auth_remove(const char *host, kiln_error **err)
{
	return update(host, NULL, NULL, err);
}
