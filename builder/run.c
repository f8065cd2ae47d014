/* run.c — a RUN step on the builder's side: its flags (--network,
 * --security, --mount), heredocs turned into the command BuildKit runs,
 * mounts prepared on the host (cache directories kept in $KILN_HOME, bind
 * sources packed as tars), the cache key and the call to the executor. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <unistd.h>

#include "builder/internal.h"

struct mounts {
	struct build_run_mount *v;
	size_t n;
	kiln_strv strs;        /* strings the mounts point to */
	int *locks;            /* cache directories held for the step */
	size_t n_locks;
	struct build_changes inputs; /* bind sources: part of the cache key */
	char **secrets;        /* secrets' bytes (and "K=V" of env= ones), wiped when done */
	size_t *secret_len;
	size_t n_secrets;
	kiln_strv step_env;    /* secrets' env= (pointing into secrets), SSH_AUTH_SOCK */
	kiln_strv step_env_own; /* what step_env holds besides secrets */
	unsigned n_ssh;
};

static void mounts_free(struct mounts *m)
{
	for (size_t i = 0; i < m->n_locks; i++)
		close(m->locks[i]);
	free(m->locks);
	free(m->v);
	kiln_strv_free(&m->strs);
	build_changes_free(&m->inputs);
	for (size_t i = 0; i < m->n_secrets; i++) {
		explicit_bzero(m->secrets[i], m->secret_len[i]);
		free(m->secrets[i]);
	}
	free(m->secrets);
	free(m->secret_len);
	free(m->step_env.v); /* its strings are in secrets or step_env_own */
	kiln_strv_free(&m->step_env_own);
}

/* Keep a secret's copy to wipe when the step is done. */
static char *keep_secret(struct mounts *m, char *p, size_t len)
{
	m->secrets = kiln_xrealloc(m->secrets, (m->n_secrets + 1) * sizeof(*m->secrets));
	m->secret_len = kiln_xrealloc(m->secret_len, (m->n_secrets + 1) * sizeof(*m->secret_len));
	m->secrets[m->n_secrets] = p;
	m->secret_len[m->n_secrets++] = len;
	return p;
}

static const char *keep(struct mounts *m, char *s)
{
	kiln_strv_push_owned(&m->strs, s);
	return s;
}

/* An image path for a mount target, symlinks resolved inside the image. */
static char *resolve_target(struct stage_state *ss, const struct df_step *st, const char *target)
{
	char *abs = target[0] == '/' ? kiln_xstrdup(target)
				     : kiln_xasprintf("%s/%s", st->workdir ? st->workdir : "/", target);
	char *idx = build_fsindex_resolve(ss->idx, abs, true);
	char *out = kiln_xasprintf("/%s", idx);
	free(abs);
	free(idx);
	return out;
}

static void push_input(struct build_changes *ch, const char *dest, const struct build_entry *e, const char *root,
		       bool keep_owner)
{
	if (ch->n == ch->cap) {
		ch->cap = ch->cap ? 2 * ch->cap : 32;
		ch->v = kiln_xrealloc(ch->v, ch->cap * sizeof(*ch->v));
	}
	struct build_item *it = &ch->v[ch->n++];
	memset(it, 0, sizeof(*it));
	it->dest = kiln_xstrdup(dest);
	it->mode = it->src_mode = e->st.st_mode;
	it->uid = it->src_uid = keep_owner ? e->st.st_uid : 0;
	it->gid = it->src_gid = keep_owner ? e->st.st_gid : 0;
	it->link = e->link ? kiln_xstrdup(e->link) : NULL;
	if (S_ISREG(e->st.st_mode)) {
		it->src = kiln_path_join(root, e->path);
		it->size = (uint64_t)e->st.st_size;
	}
}

/* The bind source's entries (names relative to the mount: "f" for a file)
 * as a tar, and as items for the cache key. */
static int bind_tar(const build_tree *tree, const char *src, bool keep_owner, const char *tar, const char *key_prefix,
		    struct build_changes *inputs, bool *file, kiln_error **err)
{
	char *rel = kiln_path_clean(src[0] == '/' ? src + 1 : src);
	const struct build_entry *top = strcmp(rel, ".") ? build_tree_find(tree, rel) : NULL;
	struct archive *w = kiln_tar_writer_new();
	size_t b = 0, e = 0;
	int rc = -1;

	if (strcmp(rel, ".") && (!top || strncmp(rel, "../", 3) == 0 || strcmp(rel, "..") == 0)) {
		kiln_err(err, KILN_E_NOTFOUND, "source %s: not found", src);
		goto out;
	}
	*file = top && !S_ISDIR(top->st.st_mode);
	if (*file) {
		b = (size_t)(top - build_tree_entry(tree, 0));
		e = b + 1;
	} else {
		build_tree_children(tree, rel, &b, &e);
	}
	if (archive_write_open_filename(w, tar) != ARCHIVE_OK) {
		kiln_tar_err(err, KILN_E_IO, w, "%s", tar);
		goto out;
	}
	for (size_t i = b; i < e; i++) {
		const struct build_entry *en = build_tree_entry(tree, i);
		const char *name = *file ? "f" : en->path + (strcmp(rel, ".") ? strlen(rel) + 1 : 0);
		char *dest = kiln_xasprintf("%s/%s", key_prefix, name);
		push_input(inputs, dest, en, build_tree_root(tree), keep_owner);
		free(dest);
		const struct build_item *it = &inputs->v[inputs->n - 1];
		struct archive_entry *ae = archive_entry_new();
		archive_entry_copy_stat(ae, &en->st);
		archive_entry_set_pathname(ae, name);
		archive_entry_set_uid(ae, it->uid);
		archive_entry_set_gid(ae, it->gid);
		if (en->link)
			archive_entry_set_symlink(ae, en->link);
		if (!S_ISREG(en->st.st_mode))
			archive_entry_set_size(ae, 0);
		if (kiln_tar_write_header(w, ae) != ARCHIVE_OK) {
			kiln_tar_err(err, KILN_E_IO, w, "%s", tar);
			archive_entry_free(ae);
			goto out;
		}
		archive_entry_free(ae);
		if (it->src) {
			int fd = open(it->src, O_RDONLY | O_CLOEXEC);
			char buf[65536];
			ssize_t n;
			if (fd < 0) {
				kiln_err_errno(err, errno, "open %s", it->src);
				goto out;
			}
			while ((n = read(fd, buf, sizeof(buf))) > 0)
				if (archive_write_data(w, buf, (size_t)n) < 0)
					break;
			close(fd);
			if (n != 0) {
				kiln_err(err, KILN_E_IO, "reading %s", it->src);
				goto out;
			}
		}
	}
	if (archive_write_close(w) != ARCHIVE_OK) {
		kiln_tar_err(err, KILN_E_IO, w, "%s", tar);
		goto out;
	}
	rc = 0;
out:
	archive_write_free(w);
	free(rel);
	return rc;
}

/* A cache mount's directory in $KILN_HOME/run-cache, created with the
 * mount's owner and mode the first time, locked for the step. */
static int cache_dir(struct run *r, struct mounts *ms, const char *id, uid_t uid, gid_t gid, mode_t mode,
		     const char **dir, kiln_error **err)
{
	char digest[KILN_DIGEST_MAX];
	kiln_digest_buf(KILN_SHA256, id, strlen(id), digest);
	char *base = kiln_home_path(build_store_home(r->s), KILN_PATH_RUN_CACHE, "%s", kiln_digest_hex(digest));
	char *data = kiln_xasprintf("%s/data", base), *lock = kiln_xasprintf("%s/lock", base);
	int fd = -1, rc = -1;

	if (kiln_mkdir_p(base, 0700, err) < 0)
		goto out;
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		kiln_err_errno(err, errno, "cache mount lock %s", lock);
		goto out;
	}
	if (access(data, F_OK) < 0) {
		if (mkdir(data, mode) < 0 || chown(data, uid, gid) < 0 || chmod(data, mode) < 0) {
			kiln_err_errno(err, errno, "cache mount %s", data);
			goto out;
		}
	}
	ms->locks = kiln_xrealloc(ms->locks, (ms->n_locks + 1) * sizeof(int));
	ms->locks[ms->n_locks++] = fd;
	fd = -1;
	*dir = keep(ms, data);
	data = NULL;
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(base);
	free(data);
	free(lock);
	return rc;
}

/* BuildKit's limit on one secret (session/secrets/secretsprovider). */
#define SECRET_MAX (500u * 1024u)

/* The secret `id` given to the build, read now; 1 when it was not given. */
static int read_secret(struct run *r, struct mounts *ms, const char *id, char **data, size_t *len, kiln_error **err)
{
	const struct build_secret *sec = NULL;

	for (size_t i = 0; i < r->o->n_secrets; i++)
		if (!strcmp(r->o->secrets[i].id, id))
			sec = &r->o->secrets[i];
	if (!sec)
		return 1;
	if (sec->env) {
		const char *v = getenv(sec->env);
		if (!v)
			return kiln_err(err, KILN_E_NOTFOUND, "secret %s: the variable %s is not set", id, sec->env);
		*len = strlen(v);
		*data = keep_secret(ms, kiln_xstrdup(v), *len);
		return 0;
	}
	char *buf = NULL;
	if (kiln_read_file(sec->file, &buf, len, SECRET_MAX, err) < 0)
		return kiln_error_wrap(err, "secret %s", id);
	*data = keep_secret(ms, buf, *len);
	return 0;
}

/* A secret or ssh mount: its bytes or the agent's socket; *skip when an
 * optional one was not given (BuildKit then mounts nothing). */
static int secret_or_ssh(struct run *r, struct mounts *ms, const struct df_mount *dm, struct build_run_mount *m,
			 bool *skip, kiln_error **err)
{
	m->file = true;
	m->readonly = true;
	m->mode = dm->mode;
	m->uid = dm->uid;
	m->gid = dm->gid;
	if (dm->type == DF_MOUNT_SSH) {
		const struct build_ssh *a = NULL;
		for (size_t i = 0; i < r->o->n_ssh; i++)
			if (!strcmp(r->o->ssh[i].id, dm->id))
				a = &r->o->ssh[i];
		if (!a) {
			*skip = true;
			if (dm->required)
				return kiln_err(err, KILN_E_NOTFOUND, "no SSH key %s forwarded from the client "
						"(give it with kiln build --ssh %s[=SOCKET])", dm->id, dm->id);
			return 0;
		}
		m->type = BUILD_MOUNT_SSH;
		m->socket = a->socket;
		return 0;
	}
	char *data = NULL;
	size_t len = 0;
	int rc = read_secret(r, ms, dm->id, &data, &len, err);
	if (rc < 0)
		return -1;
	if (rc == 1) {
		*skip = true;
		if (dm->required)
			return kiln_err(err, KILN_E_NOTFOUND, "secret %s: not found (give it with kiln build --secret id=%s,src=FILE)",
					dm->id, dm->id);
		return 0;
	}
	if (dm->env) {
		char *kv = kiln_xmalloc(strlen(dm->env) + len + 2);
		memcpy(kv, dm->env, strlen(dm->env));
		kv[strlen(dm->env)] = '=';
		memcpy(kv + strlen(dm->env) + 1, data, len);
		kv[strlen(dm->env) + 1 + len] = '\0';
		kiln_strv_push_owned(&ms->step_env, keep_secret(ms, kv, strlen(dm->env) + len + 1));
	}
	if (!dm->target) { /* env= only */
		*skip = true;
		return 0;
	}
	m->type = BUILD_MOUNT_SECRET;
	m->data = data;
	m->len = len;
	return 0;
}

/* One RUN --mount (as the plan parsed it) made ready for the executor. */
static int prepare_mount(struct run *r, struct stage_state *ss, const struct df_step *st, const struct df_mount *dm,
			 struct mounts *ms, kiln_error **err)
{
	bool skip = false;
	int rc = -1;

	ms->v = kiln_xrealloc(ms->v, (ms->n + 1) * sizeof(*ms->v));
	struct build_run_mount *m = &ms->v[ms->n];
	memset(m, 0, sizeof(*m));
	if (dm->type == DF_MOUNT_SECRET || dm->type == DF_MOUNT_SSH) {
		if (secret_or_ssh(r, ms, dm, m, &skip, err) < 0)
			goto out;
		if (skip) {
			rc = 0;
			goto out;
		}
	}
	const char *target = dm->target ? dm->target : "";
	m->target = keep(ms, resolve_target(ss, st, target));
	if (!strcmp(m->target, "/")) {
		kiln_err(err, KILN_E_INVALID, "invalid mount target \"%s\"", target);
		goto out;
	}
	for (size_t i = 0; i < ms->n; i++)
		if (!strcmp(ms->v[i].target, m->target)) {
			kiln_err(err, KILN_E_INVALID, "RUN --mount: two mounts at %s", m->target);
			goto out;
		}
	if (dm->type == DF_MOUNT_TMPFS) {
		m->type = BUILD_MOUNT_TMPFS;
		m->size = dm->size;
		m->readonly = dm->readonly;
	} else if (dm->type == DF_MOUNT_CACHE) {
		if (dm->from) {
			kiln_err(err, KILN_E_INVALID, "RUN --mount=type=cache,from=%s: seeding a cache from a stage or "
				 "image is not supported", dm->from);
			goto out;
		}
		m->type = BUILD_MOUNT_CACHE;
		m->readonly = dm->readonly;
		m->save = !m->readonly;
		if (cache_dir(r, ms, dm->id, (uid_t)dm->uid, (gid_t)dm->gid, (mode_t)dm->mode, &m->src_dir, err) < 0)
			goto out;
	} else if (dm->type == DF_MOUNT_BIND) {
		const build_tree *tree;
		bool keep_owner;
		m->type = BUILD_MOUNT_BIND;
		m->readonly = dm->readonly;
		if (build_source_tree(r, dm->from_stage, dm->from_stage < 0 ? dm->from : NULL, &tree, &keep_owner,
				      err) < 0)
			goto out;
		char *tar = kiln_xasprintf("%s/mount-%zu.tar", r->scratch, ms->n);
		m->src_tar = keep(ms, tar);
		char *prefix = kiln_xasprintf("mount %s", m->target);
		int brc = bind_tar(tree, dm->source ? dm->source : "/", keep_owner, tar, prefix, &ms->inputs, &m->file,
				   err);
		free(prefix);
		if (brc < 0)
			goto out;
	}
	ms->n++;
	rc = 0;
out:
	/* a secret's or an agent's error names its id already */
	if (rc < 0 && dm->type != DF_MOUNT_SECRET && dm->type != DF_MOUNT_SSH)
		kiln_error_wrap(err, "--mount=type=%s,target=%s", df_mount_type_name(dm->type), dm->target ? dm->target : "");
	return rc;
}

/* Is the command line exactly one heredoc word ("<<EOF", "<<-'EOF'")? */
static bool simple_heredoc(const char *cmd)
{
	while (*cmd >= '0' && *cmd <= '9')
		cmd++;
	if (strncmp(cmd, "<<", 2))
		return false;
	cmd += 2;
	if (*cmd == '-')
		cmd++;
	if (!*cmd)
		return false;
	for (; *cmd; cmd++)
		if (*cmd == ' ' || *cmd == '\t' || *cmd == '\n' || *cmd == '<')
			return false;
	return true;
}

/* BuildKit's RUN with heredocs: a lone heredoc starting with "#!" is a
 * script file run directly (kiln mounts it read-only at /dev/pipes/NAME);
 * a lone heredoc is the shell's command; anything else goes to the shell
 * with the bodies put back after the command line. */
static json_t *heredoc_argv(struct run *r, const struct df_step *st, struct mounts *ms, kiln_error **err)
{
	kiln_buf cmd = KILN_BUF_INIT;
	json_t *argv = NULL;

	for (size_t i = 0; i < st->args.n; i++)
		kiln_buf_addf(&cmd, "%s%s", i ? " " : "", st->args.v[i]);
	const struct df_heredoc *h = &st->heredocs[0];
	if (st->n_heredocs == 1 && simple_heredoc(cmd.buf) && !strncmp(h->content, "#!", 2)) {
		if (strchr(h->name, '/') || !strcmp(h->name, ".") || !strcmp(h->name, "..")) {
			kiln_err(err, KILN_E_INVALID, "heredoc name '%s' cannot be a file name", h->name);
			goto out;
		}
		char *dir = kiln_xasprintf("%s/heredoc-%d", r->scratch, r->step);
		char *file = kiln_path_join(dir, h->name);
		if (kiln_mkdir_p(dir, 0755, err) < 0 ||
		    kiln_write_atomic(file, h->content, strlen(h->content), 0755, err) < 0) {
			free(dir);
			free(file);
			goto out;
		}
		free(file);
		ms->v = kiln_xrealloc(ms->v, (ms->n + 1) * sizeof(*ms->v));
		ms->v[ms->n++] = (struct build_run_mount){ .type = BUILD_MOUNT_BIND, .target = "/dev/pipes",
							   .src_dir = keep(ms, dir), .readonly = true };
		argv = json_pack("[s]", keep(ms, kiln_xasprintf("/dev/pipes/%s", h->name)));
		goto out;
	}
	json_t *a = st->shell.n ? json_array() : json_pack("[s,s]", "/bin/sh", "-c");
	for (size_t i = 0; i < st->shell.n; i++)
		json_array_append_new(a, json_string(st->shell.v[i]));
	if (st->n_heredocs == 1 && simple_heredoc(cmd.buf)) {
		json_array_append_new(a, json_string(h->content));
	} else {
		kiln_buf full = KILN_BUF_INIT;
		kiln_buf_adds(&full, cmd.buf);
		for (size_t i = 0; i < st->n_heredocs; i++)
			kiln_buf_addf(&full, "\n%s%s", st->heredocs[i].content, st->heredocs[i].name);
		json_array_append_new(a, json_string(full.buf));
		kiln_buf_free(&full);
	}
	argv = a;
out:
	kiln_buf_free(&cmd);
	return argv;
}

static void on_run_output(void *ud, const void *data, size_t len)
{
	struct run *r = ud;
	struct build_event ev = { .kind = BUILD_EV_OUTPUT, .step = r->step, .total = r->total,
				  .data = data, .len = len };
	build_emit(r, &ev);
}

/* Does a RUN of the stage from `from` on want the network? */
static bool stage_wants_net(const struct df_stage *sg, size_t from)
{
	for (size_t i = from; i < sg->n_steps; i++) {
		const char *net = sg->steps[i].kind == DF_RUN ? build_step_flag(&sg->steps[i], "network") : NULL;
		if (sg->steps[i].kind == DF_RUN && (!net || strcmp(net, "none")))
			return true;
	}
	return false;
}

/* Does a RUN of the stage from `from` on mount a secret or an ssh agent? */
static bool stage_wants_secrets(const struct df_stage *sg, size_t from)
{
	for (size_t i = from; i < sg->n_steps; i++)
		for (size_t k = 0; k < sg->steps[i].n_mounts; k++)
			if (sg->steps[i].mounts[k].type == DF_MOUNT_SECRET || sg->steps[i].mounts[k].type == DF_MOUNT_SSH)
				return true;
	return false;
}

int build_run_step(struct run *r, struct stage_state *ss, const struct df_stage *sg, size_t index,
		   const char *text, bool *cached, kiln_error **err)
{
	const struct df_step *st = &sg->steps[index];
	kiln_buf keytext = KILN_BUF_INIT;
	char key[KILN_DIGEST_MAX];
	struct build_layer l;
	struct mounts ms = { 0 };
	struct build_run_stats stats = { 0 };
	int hit = 0, rc = -1;
	json_t *argv = NULL;
	const struct build_executor_ops *ex = r->o->executor ? r->o->executor : &build_executor_none;
	const char *net = build_step_flag(st, "network"), *sec = build_step_flag(st, "security");

	if (net && strcmp(net, "none") && strcmp(net, "default")) {
		kiln_err(err, KILN_E_INVALID, "RUN --network=%s: want none or default%s", net,
			 strcmp(net, "host") ? "" : " (the builder VM has no host network to share)");
		goto out;
	}
	/* A RUN already runs as root with every capability and no seccomp filter,
	 * inside a VM that is the isolation boundary: "insecure" changes nothing. */
	if (sec && strcmp(sec, "sandbox") && strcmp(sec, "insecure")) {
		kiln_err(err, KILN_E_INVALID, "RUN --security=%s: want sandbox or insecure", sec);
		goto out;
	}
	for (size_t i = 0; i < st->n_mounts; i++)
		if (build_stage_index(r, ss, err) < 0 || prepare_mount(r, ss, st, &st->mounts[i], &ms, err) < 0)
			goto out;
	/* BuildKit's exec: SSH_AUTH_SOCK is the first ssh mount's unless set */
	for (size_t i = 0; i < st->n_mounts; i++) {
		bool set = false;
		if (st->mounts[i].type != DF_MOUNT_SSH)
			continue;
		for (size_t k = 0; k < st->env.n; k++)
			set |= !strncmp(st->env.v[k], "SSH_AUTH_SOCK=", 14);
		if (!set) {
			char *kv = kiln_xasprintf("SSH_AUTH_SOCK=%s", st->mounts[i].target);
			kiln_strv_push_owned(&ms.step_env_own, kv);
			kiln_strv_push_owned(&ms.step_env, kv);
		}
		break;
	}
	argv = st->n_heredocs ? heredoc_argv(r, st, &ms, err) : build_command_json(st);
	if (!argv)
		goto out;
	/* parents before what is mounted inside them */
	for (size_t i = 1; i < ms.n; i++)
		for (size_t j = i; j > 0 && strlen(ms.v[j - 1].target) > strlen(ms.v[j].target); j--) {
			struct build_run_mount t = ms.v[j];
			ms.v[j] = ms.v[j - 1];
			ms.v[j - 1] = t;
		}
	/* the command's environment and inputs are part of what it does */
	kiln_buf_addf(&keytext, "%s\n", text);
	for (size_t i = 0; i < st->n_heredocs; i++)
		kiln_buf_addf(&keytext, "heredoc %s %zu\n%s\n", st->heredocs[i].name, strlen(st->heredocs[i].content),
			      st->heredocs[i].content);
	for (size_t i = 0; i < st->env.n; i++)
		kiln_buf_addf(&keytext, "env %s\n", st->env.v[i]);
	kiln_buf_addf(&keytext, "workdir %s\nuser %s\n", st->workdir ? st->workdir : "/", st->user ? st->user : "");
	kiln_buf_addf(&keytext, "compression %s\n", build_layer_media_type(r->o->compression));
	build_changes_finish(&ms.inputs);
	if (build_cache_key_store(r->s, ss->key, keytext.buf, &ms.inputs, key, err) < 0)
		goto out;
	if (!r->o->no_cache && (hit = build_cache_get(r->s, key, &l, err)) < 0)
		goto out;
	if (!hit) {
		struct build_run_request req = {
			.step = st, .instruction = text, .argv = argv, .env = st->env.v, .n_env = st->env.n,
			.workdir = st->workdir ? st->workdir : "/", .user = st->user ? st->user : "",
			.store = r->s, .layers = ss->layers, .n_layers = ss->n_layers, .n_base_layers = ss->n_base,
			.compression = r->o->compression, .scratch = r->scratch,
			.network = !net || strcmp(net, "none") != 0, .stage_network = stage_wants_net(sg, index),
			.stage_secrets = stage_wants_secrets(sg, index),
			.mounts = ms.v, .n_mounts = ms.n, .step_env = ms.step_env.v, .n_step_env = ms.step_env.n,
			.on_output = on_run_output, .output_ud = r, .stats = &stats,
		};
		if (ex->run(r->o->executor_ctx, &ss->session, &req, &l, err) < 0)
			goto out;
		if (stats.booted) {
			struct build_event ev = { .kind = BUILD_EV_VM, .step = r->step, .total = r->total,
						  .seconds = stats.boot_ms / 1e3, .run = &stats };
			build_emit(r, &ev);
		}
		r->last_run = stats;
		r->last_run_valid = true;
		if (build_cache_put(r->s, key, &l, text, err) < 0)
			goto out;
	}
	*cached = hit == 1;
	memcpy(ss->key, key, KILN_DIGEST_MAX);
	rc = build_add_layer(r, ss, &l, err);
out:
	mounts_free(&ms);
	json_decref(argv);
	kiln_buf_free(&keytext);
	return rc;
}

void build_stage_end(struct run *r, struct stage_state *ss)
{
	const struct build_executor_ops *ex = r->o->executor ? r->o->executor : &build_executor_none;

	if (ss->session && ex->end)
		ex->end(r->o->executor_ctx, ss->session);
	ss->session = NULL;
}
