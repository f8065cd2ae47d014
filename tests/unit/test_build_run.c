/* test_build_run.c — the builder's side of RUN through a recording executor
 * (no VM): one session per stage handed to every RUN of it and ended once,
 * also when a step fails; heredocs turned into BuildKit's commands; --mount
 * prepared (bind tars, cache directories, tmpfs, secrets, ssh sockets) from
 * the plan's typed mounts, --network, --security; cache keys covering heredoc
 * bodies and bind sources but not cache mounts or secrets. */
#include <archive.h>
#include <archive_entry.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder/builder.h"
#include "test.h"

static char *ctxdir, *home;
static const struct build_secret *g_secrets;
static size_t g_n_secrets;
static const struct build_ssh *g_ssh;
static size_t g_n_ssh;

struct call {
	char *argv;          /* JSON */
	char *mounts;        /* "type target ro file|..." */
	bool network, stage_network;
	build_exec_session *session;
	size_t n_layers;
	char *bind_tar_names; /* entries of the first bind tar */
	char *heredoc_file;   /* content of the /dev/pipes script */
	char *secrets;        /* "target=bytes mode uid gid|..." */
	char *step_env;       /* "K=V|..." */
};

struct rec {
	struct call calls[32];
	int n_calls, n_sessions, n_ends, fail_at;
};

struct build_exec_session {
	int id;
};

static char *tar_names(const char *path)
{
	struct archive *a = archive_read_new();
	struct archive_entry *e;
	kiln_buf b = KILN_BUF_INIT;

	archive_read_support_format_tar(a);
	if (archive_read_open_filename(a, path, 4096) == ARCHIVE_OK)
		while (archive_read_next_header(a, &e) == ARCHIVE_OK)
			kiln_buf_addf(&b, "%s%s:%o", b.len ? " " : "", archive_entry_pathname(e),
				      (unsigned)(archive_entry_mode(e) & 07777));
	archive_read_free(a);
	return kiln_buf_detach(&b);
}

static int rec_run(void *ctx, build_exec_session **sp, const struct build_run_request *req, struct build_layer *out,
		   kiln_error **err)
{
	struct rec *r = ctx;
	struct call *c = &r->calls[r->n_calls++];
	kiln_buf m = KILN_BUF_INIT;
	kiln_buf sec = KILN_BUF_INIT, env = KILN_BUF_INIT;
	static const char *types[] = { "bind", "cache", "tmpfs", "secret", "ssh" };

	if (!*sp) {
		*sp = kiln_xcalloc(1, sizeof(**sp));
		(*sp)->id = ++r->n_sessions;
	}
	c->session = *sp;
	c->argv = json_dumps(req->argv, JSON_COMPACT);
	c->network = req->network;
	c->stage_network = req->stage_network;
	c->n_layers = req->n_layers;
	for (size_t i = 0; i < req->n_mounts; i++) {
		const struct build_run_mount *mt = &req->mounts[i];
		kiln_buf_addf(&m, "%s%s %s%s%s%s", i ? "|" : "", types[mt->type], mt->target, mt->readonly ? " ro" : "",
			      mt->file ? " file" : "", mt->save ? " save" : "");
		if (mt->type == BUILD_MOUNT_TMPFS && mt->size)
			kiln_buf_addf(&m, " size=%llu", (unsigned long long)mt->size);
		if (mt->type == BUILD_MOUNT_CACHE) {
			struct stat st;
			CHECK(mt->src_dir && stat(mt->src_dir, &st) == 0 && S_ISDIR(st.st_mode));
			CHECK(mt->src_dir && strstr(mt->src_dir, "/run-cache/") != NULL);
		}
		if (mt->type == BUILD_MOUNT_SECRET)
			kiln_buf_addf(&sec, "%s%s=%.*s %o %u %u", sec.len ? "|" : "", mt->target, (int)mt->len,
				      (const char *)mt->data, (unsigned)mt->mode, (unsigned)mt->uid, (unsigned)mt->gid);
		if (mt->type == BUILD_MOUNT_SSH)
			kiln_buf_addf(&sec, "%s%s=socket:%s %o", sec.len ? "|" : "", mt->target, mt->socket,
				      (unsigned)mt->mode);
		if (mt->src_tar && !c->bind_tar_names)
			c->bind_tar_names = tar_names(mt->src_tar);
		if (mt->src_dir && !strcmp(mt->target, "/dev/pipes")) {
			char *p = kiln_path_join(mt->src_dir, "S"), *data = NULL;
			size_t len = 0;
			kiln_error *e = NULL;
			struct stat st;
			if (kiln_read_file(p, &data, &len, 4096, &e) == 0 && stat(p, &st) == 0 && (st.st_mode & 0111))
				c->heredoc_file = data;
			else
				free(data);
			kiln_error_free(e);
			free(p);
		}
	}
	c->mounts = kiln_buf_detach(&m);
	c->secrets = kiln_buf_detach(&sec);
	for (size_t i = 0; i < req->n_step_env; i++)
		kiln_buf_addf(&env, "%s%s", i ? "|" : "", req->step_env[i]);
	c->step_env = kiln_buf_detach(&env);
	if (r->n_calls == r->fail_at)
		return kiln_err(err, KILN_E_GENERIC, "the command returned a non-zero code: 7");
	struct build_changes ch = { 0 };
	return build_layer_write(req->store, &ch, req->compression, 0, out, err);
}

static void rec_end(void *ctx, build_exec_session *s)
{
	struct rec *r = ctx;
	r->n_ends++;
	free(s);
}

static const struct build_executor_ops rec_ops = { .name = "test", .run = rec_run, .end = rec_end };

static void rec_free(struct rec *r)
{
	for (int i = 0; i < r->n_calls; i++) {
		free(r->calls[i].argv);
		free(r->calls[i].mounts);
		free(r->calls[i].bind_tar_names);
		free(r->calls[i].heredoc_file);
		free(r->calls[i].secrets);
		free(r->calls[i].step_env);
	}
	memset(r, 0, sizeof(*r));
}

static void put(const char *rel, const char *content)
{
	char *p = kiln_path_join(ctxdir, rel), *d = kiln_xstrdup(p);
	kiln_error *err = NULL;
	*strrchr(d, '/') = '\0';
	kiln_mkdir_p(d, 0755, &err);
	kiln_error_clear(&err);
	if (kiln_write_atomic(p, content, strlen(content), 0644, &err) < 0)
		kiln_error_clear(&err);
	free(d);
	free(p);
}

static int build(struct rec *r, bool no_cache, char **errmsg, struct build_result *res)
{
	struct build_options o = { .context = ctxdir, .home = home, .executor = &rec_ops, .executor_ctx = r,
				   .no_cache = no_cache, .secrets = g_secrets, .n_secrets = g_n_secrets, .ssh = g_ssh,
				   .n_ssh = g_n_ssh };
	kiln_error *err = NULL;
	int rc = build_run(&o, res, &err);
	if (errmsg)
		*errmsg = rc < 0 ? kiln_xstrdup(kiln_error_message(err)) : NULL;
	kiln_error_free(err);
	return rc;
}

static const char dockerfile[] = "FROM scratch AS a\n"
				 "COPY f.txt /f.txt\n"
				 "RUN <<EOF\n"
				 "echo hi\n"
				 "EOF\n"
				 "RUN <<S\n"
				 "#!/bin/sh\n"
				 "echo s\n"
				 "S\n"
				 "RUN cat <<A >/x && echo done\n"
				 "body\n"
				 "A\n"
				 "RUN --network=none --mount=type=bind,source=d,target=rel --mount=type=cache,target=/c,id=cid "
				 "--mount=type=tmpfs,target=/c/t,size=1024 --security=insecure true\n"
				 "WORKDIR /w\n"
				 "RUN --mount=type=bind,source=f.txt,target=m/f.txt,rw [\"/bin/true\", \"x\"]\n"
				 "FROM scratch\n"
				 "COPY --from=a /f.txt /g\n"
				 "RUN --network=none true\n";

static void test_sessions_and_commands(void)
{
	struct rec r = { 0 };
	struct build_result res;
	char *msg = NULL;

	put("Dockerfile", dockerfile);
	put("f.txt", "file\n");
	put("d/one", "1\n");
	put("d/sub/two", "2\n");
	CHECK_INT(build(&r, false, &msg, &res), 0);
	if (msg)
		printf("#   %s\n", msg);
	free(msg);
	CHECK_INT(r.n_calls, 6);
	CHECK_INT(r.n_sessions, 2);
	CHECK_INT(r.n_ends, 2);
	if (r.n_calls != 6)
		goto out;
	/* one session for the five RUNs of stage a, another for the last stage */
	for (int i = 1; i < 5; i++)
		CHECK(r.calls[i].session == r.calls[0].session);
	CHECK(r.calls[5].session != r.calls[0].session);
	/* every RUN sees the layers before it */
	CHECK_INT(r.calls[0].n_layers, 1);
	CHECK_INT(r.calls[1].n_layers, 2);
	CHECK_INT(r.calls[4].n_layers, 6); /* + the WORKDIR layer */
	CHECK_STR(r.calls[0].argv, "[\"/bin/sh\",\"-c\",\"echo hi\\n\"]");
	CHECK_STR(r.calls[1].argv, "[\"/dev/pipes/S\"]");
	CHECK_STR(r.calls[1].mounts, "bind /dev/pipes ro");
	CHECK_STR(r.calls[1].heredoc_file, "#!/bin/sh\necho s\n");
	CHECK_STR(r.calls[2].argv, "[\"/bin/sh\",\"-c\",\"cat <<A >/x && echo done\\nbody\\nA\"]");
	CHECK_STR(r.calls[3].mounts, "cache /c save|bind /rel ro|tmpfs /c/t size=1024");
	CHECK_STR(r.calls[3].bind_tar_names, "one:644 sub/:755 sub/two:644");
	CHECK(!r.calls[3].network);
	CHECK(r.calls[3].stage_network); /* the RUN after it wants the network */
	CHECK(r.calls[4].network);
	CHECK_STR(r.calls[4].argv, "[\"/bin/true\",\"x\"]");
	CHECK_STR(r.calls[4].mounts, "bind /w/m/f.txt file");
	CHECK_STR(r.calls[4].bind_tar_names, "f:644");
	CHECK(!r.calls[5].network && !r.calls[5].stage_network);
	rec_free(&r);

	/* cached: no executor call, no session */
	CHECK_INT(build(&r, false, NULL, &res), 0);
	CHECK_INT(r.n_calls, 0);
	CHECK_INT(r.n_sessions + r.n_ends, 0);
	rec_free(&r);

	/* a bind source's content is an input; a cache mount's is not */
	put("d/sub/two", "2b\n");
	CHECK_INT(build(&r, false, NULL, &res), 0);
	CHECK_INT(r.n_calls, 2); /* the bind RUN and the one after it; stage 2 hits */
	rec_free(&r);
	char *cdir = kiln_xasprintf("%s/run-cache", home);
	struct stat st;
	CHECK(stat(cdir, &st) == 0);
	free(cdir);
	CHECK_INT(build(&r, false, NULL, &res), 0);
	CHECK_INT(r.n_calls, 0);
	rec_free(&r);

	/* a heredoc body is part of the step */
	char *df2 = kiln_xstrdup(dockerfile);
	char *p = strstr(df2, "echo hi");
	p[5] = 'o';
	put("Dockerfile", df2);
	free(df2);
	CHECK_INT(build(&r, false, NULL, &res), 0);
	CHECK_INT(r.n_calls, 5);
out:
	rec_free(&r);
}

static void test_failure_ends_session(void)
{
	struct rec r = { .fail_at = 2 };
	struct build_result res;
	char *msg = NULL;

	put("Dockerfile", "FROM scratch\nRUN true\nRUN false\nRUN never\n");
	CHECK_INT(build(&r, true, &msg, &res), -1);
	CHECK_INT(r.n_calls, 2);
	CHECK_INT(r.n_sessions, 1);
	CHECK_INT(r.n_ends, 1);
	CHECK(msg && strstr(msg, "Dockerfile:3: [3/4] RUN false: the command returned a non-zero code: 7"));
	free(msg);
	rec_free(&r);
}

static void refused(const char *df, const char *want)
{
	struct rec r = { 0 };
	struct build_result res;
	char *msg = NULL;

	put("Dockerfile", df);
	CHECK_INT(build(&r, true, &msg, &res), -1);
	CHECK_INT(r.n_calls + r.n_sessions, 0);
	if (!msg || !strstr(msg, want))
		printf("#   %s\n#   want: %s\n", msg ? msg : "(none)", want);
	CHECK(msg && strstr(msg, want));
	free(msg);
	rec_free(&r);
}

/* The plan's typed mounts are what the builder uses: BuildKit's spellings
 * (keys any case, strconv.ParseBool values) reach the executor as written
 * meant them; secrets and ssh sockets come from the build's options. */
static void test_typed_mounts(void)
{
	struct rec r = { 0 };
	struct build_result res;
	char *msg = NULL;
	char *sfile = kiln_path_join(home, "secret-value");
	kiln_error *e = NULL;
	const struct build_secret secs[] = { { .id = "s", .file = sfile } };
	const struct build_ssh ssh[] = { { .id = "default", .socket = "/host/agent.sock" } };

	kiln_write_atomic(sfile, "s3cr3t", 6, 0600, &e);
	kiln_error_clear(&e);
	g_secrets = secs, g_n_secrets = 1, g_ssh = ssh, g_n_ssh = 1;
	put("Dockerfile", "FROM scratch\n"
			  "RUN --mount=Type=cache,target=/x,ro=t --mount=TYPE=Secret,id=s,env=E,target=/s,uid=7 "
			  "--mount=type=ssh,MODE=0640 --mount=type=secret,id=absent --mount=type=tmpfs,target=/t,rw=F true\n");
	CHECK_INT(build(&r, false, &msg, &res), 0);
	if (msg)
		printf("#   %s\n", msg);
	free(msg);
	CHECK_INT(r.n_calls, 1);
	if (r.n_calls == 1) {
		CHECK_STR(r.calls[0].mounts, "cache /x ro|secret /s ro file|tmpfs /t ro|ssh /run/buildkit/ssh_agent.0 ro file");
		CHECK_STR(r.calls[0].secrets, "/s=s3cr3t 400 7 0|/run/buildkit/ssh_agent.0=socket:/host/agent.sock 640");
		CHECK_STR(r.calls[0].step_env, "E=s3cr3t|SSH_AUTH_SOCK=/run/buildkit/ssh_agent.0");
	}
	rec_free(&r);
	/* another value of the secret: still a cache hit, as in BuildKit */
	kiln_write_atomic(sfile, "other!", 6, 0600, &e);
	kiln_error_clear(&e);
	CHECK_INT(build(&r, false, NULL, &res), 0);
	CHECK_INT(r.n_calls, 0);
	rec_free(&r);
	/* required ones not given */
	g_n_secrets = g_n_ssh = 0;
	put("Dockerfile", "FROM scratch\nRUN --mount=type=secret,id=s,required=true true\n");
	CHECK_INT(build(&r, true, &msg, &res), -1);
	CHECK(msg && strstr(msg, "Dockerfile:2: [2/2] RUN --mount=type=secret,id=s,required=true true: "
				 "secret s: not found"));
	free(msg);
	rec_free(&r);
	put("Dockerfile", "FROM scratch\nRUN --mount=type=ssh,required true\n");
	CHECK_INT(build(&r, true, &msg, &res), -1);
	CHECK(msg && strstr(msg, "no SSH key default forwarded"));
	free(msg);
	rec_free(&r);
	g_secrets = NULL, g_ssh = NULL;
	free(sfile);
}

static void test_refused(void)
{
	refused("FROM scratch\nRUN --mount=type=cache true\n", "invalid mount target \"\"");
	refused("FROM scratch\nRUN --mount=type=cache,ro=yes,target=/x true\n", "invalid value for ro: yes");
	refused("FROM scratch\nRUN --mount=type=bind,target=/x,bogus=1 true\n", "unexpected key 'bogus'");
	refused("FROM scratch\nRUN --mount=type=bind,source=nope,target=/x true\n", "source nope: not found");
	refused("FROM scratch\nRUN --mount=type=bind,source=../..,target=/x true\n", "not found");
	refused("FROM scratch\nRUN --mount=type=cache,target=/x,from=y true\n", "seeding a cache");
	refused("FROM scratch\nRUN --mount=type=tmpfs,target=/x --mount=type=tmpfs,target=/x true\n", "two mounts at /x");
	refused("FROM scratch\nRUN --network=host true\n", "want none or default");
	refused("FROM scratch\nRUN --security=weird true\n", "unsupported security mode");
	refused("FROM scratch\nRUN --mount=type=cache,target=/x,mode=9 true\n", "invalid value 9 for mode");
}

int main(void)
{
	kiln_error *err = NULL;

	ctxdir = kiln_mkdtemp("kiln-test-run", &err);
	home = kiln_mkdtemp("kiln-test-run-home", &err);
	if (!ctxdir || !home) {
		printf("not ok - temp dirs: %s\n", kiln_error_message(err));
		return 1;
	}
	RUN(test_sessions_and_commands);
	RUN(test_failure_ends_session);
	RUN(test_typed_mounts);
	RUN(test_refused);
	kiln_rm_rf(ctxdir, &err);
	kiln_rm_rf(home, &err);
	kiln_error_free(err);
	free(ctxdir);
	free(home);
	return test_done();
}
