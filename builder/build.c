/* build.c — `kiln build`: parse and plan the Dockerfile, then build each
 * stage the target needs in order.  Filesystem steps (COPY, ADD, WORKDIR)
 * become layers on the host, RUN goes through the executor table, the rest
 * edits the image config; every layer step is cached by content. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "builder/internal.h"

void build_emit(struct run *r, const struct build_event *ev)
{
	if (r->o->on_event)
		r->o->on_event(r->o->event_ud, ev);
}

static int load_image(struct run *r, const char *ref, struct img_slot **out, kiln_error **err)
{
	for (size_t i = 0; i < r->n_imgs; i++)
		if (strcmp(r->imgs[i].ref, ref) == 0) {
			*out = &r->imgs[i];
			return 0;
		}
	struct build_image *im;
	if (r->o->registry_bases && (strncmp(ref, "oci:", 4) == 0 || strncmp(ref, "oci-archive:", 12) == 0 ||
				     strncmp(ref, "docker-archive:", 15) == 0))
		return kiln_err(err, KILN_E_INVALID, "%s names a path on the build host: this build takes registry "
				"references and stages only", ref);
	if (build_image_load(r->s, ref, &im, err) < 0)
		return -1;
	r->imgs = kiln_xrealloc(r->imgs, (r->n_imgs + 1) * sizeof(*r->imgs));
	r->imgs[r->n_imgs] = (struct img_slot){ .ref = kiln_xstrdup(ref), .im = im };
	*out = &r->imgs[r->n_imgs++];
	return 0;
}

/* plan hook: a base image's env, WORKDIR, USER and SHELL start its stage */
static int image_config_hook(void *ctx, const char *ref, const char *platform, struct df_image_config *out,
			     kiln_error **err)
{
	struct run *r = ctx;
	struct img_slot *slot;
	size_t i;
	json_t *v;

	if (load_image(r, ref, &slot, err) < 0)
		return -1;
	json_t *cfg = json_object_get(slot->im->config, "config");
	json_array_foreach(json_object_get(cfg, "Env"), i, v)
		if (json_is_string(v))
			kiln_strv_push(&out->env, json_string_value(v));
	json_array_foreach(json_object_get(cfg, "Shell"), i, v)
		if (json_is_string(v))
			kiln_strv_push(&out->shell, json_string_value(v));
	/* run as the stage's first steps, as BuildKit does */
	json_array_foreach(json_object_get(cfg, "OnBuild"), i, v)
		if (json_is_string(v))
			kiln_strv_push(&out->onbuild, json_string_value(v));
	const char *wd = kiln_json_str(cfg, "WorkingDir"), *user = kiln_json_str(cfg, "User");
	out->workdir = wd && wd[0] ? kiln_xstrdup(wd) : NULL;
	out->user = user && user[0] ? kiln_xstrdup(user) : NULL;
	return 0;
}

const char *build_step_flag(const struct df_step *st, const char *name)
{
	const char *v = NULL;
	for (size_t i = 0; i < st->n_flags; i++)
		if (strcmp(st->flags[i].key, name) == 0)
			v = st->flags[i].value;
	return v;
}

/* The step as expanded: the text logged and hashed into the cache key. */
static char *step_text(const struct df_step *st)
{
	kiln_buf b = KILN_BUF_INIT;
	const char *name = df_kind_name(st->kind);

	for (const char *p = name; *p; p++)
		kiln_buf_addc(&b, (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p));
	for (size_t i = 0; i < st->n_flags; i++)
		kiln_buf_addf(&b, " --%s%s%s", st->flags[i].key, st->flags[i].value[0] ? "=" : "",
			      st->flags[i].value);
	if (st->exec_form) {
		json_t *a = json_array();
		for (size_t i = 0; i < st->args.n; i++)
			json_array_append_new(a, json_string(st->args.v[i]));
		char *s = json_dumps(a, JSON_COMPACT);
		kiln_buf_addf(&b, " %s", s);
		free(s);
		json_decref(a);
	} else {
		for (size_t i = 0; i < st->args.n; i++)
			kiln_buf_addf(&b, " %s", st->args.v[i]);
	}
	return kiln_buf_detach(&b);
}

static void push_layer(struct stage_state *ss, const struct build_layer *l)
{
	if (ss->n_layers == ss->cap) {
		ss->cap = ss->cap ? 2 * ss->cap : 8;
		ss->layers = kiln_xrealloc(ss->layers, ss->cap * sizeof(*ss->layers));
	}
	ss->layers[ss->n_layers++] = *l;
}

int build_add_layer(struct run *r, struct stage_state *ss, const struct build_layer *l, kiln_error **err)
{
	push_layer(ss, l);
	return 0;
}

/* The path index is brought up to date only when a step asks it something:
 * reading a 100 MiB layer back just to index it costs more than the COPY's
 * cache hit, and the last layers of a stage are rarely asked about; a
 * layer read once is replayed from its record (layer-index/HEX). */
int build_stage_index(struct run *r, struct stage_state *ss, kiln_error **err)
{
	for (; ss->n_indexed < ss->n_layers; ss->n_indexed++) {
		const char *d = ss->layers[ss->n_indexed].digest;
		char *p = build_store_blob_path(r->s, d);
		/* a layer's entries are recorded once (a cached COPY on a large base
		 * inflated all of its layers every time) */
		char *rec = kiln_home_path(build_store_home(r->s), KILN_PATH_LAYER_INDEX, "%s", kiln_digest_hex(d));
		int rc = build_fsindex_apply_layer_cached(ss->idx, p, rec, err);
		free(rec);
		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

static void key_chain(char key[KILN_DIGEST_MAX], const char *text)
{
	kiln_error *err = NULL;
	char parent[KILN_DIGEST_MAX];

	memcpy(parent, key, KILN_DIGEST_MAX);
	build_cache_key(parent, text, NULL, key, &err); /* no files: cannot fail */
	kiln_error_free(err);
}

/* A layer step: cache lookup by the key over its changes, else write it. */
static int layer_step(struct run *r, struct stage_state *ss, const char *text, const struct build_changes *ch,
		      bool *cached, kiln_error **err)
{
	char key[KILN_DIGEST_MAX];
	struct build_layer l;
	int hit = 0;

	/* the same content compressed differently is a different layer */
	char *keytext = kiln_xasprintf("%s\ncompression %s", text, build_layer_media_type(r->o->compression));
	int krc = build_cache_key_store(r->s, ss->key, keytext, ch, key, err);
	free(keytext);
	if (krc < 0)
		return -1;
	if (!r->o->no_cache) {
		hit = build_cache_get(r->s, key, &l, err);
		if (hit < 0)
			return -1;
	}
	if (!hit) {
		int64_t epoch = 0;
		const char *sde = getenv("SOURCE_DATE_EPOCH");
		if (sde && *sde)
			epoch = strtoll(sde, NULL, 10);
		if (build_layer_write(r->s, ch, r->o->compression, epoch, &l, err) < 0 ||
		    build_cache_put(r->s, key, &l, text, err) < 0)
			return -1;
	}
	*cached = hit == 1;
	memcpy(ss->key, key, KILN_DIGEST_MAX);
	return build_add_layer(r, ss, &l, err);
}

/* The image paths COPY's sources can name: each source cleaned (index form)
 * up to the directory of its first glob character.  False when one can name
 * anything (the root, "..", a glob in the first component). */
static bool source_prefixes(const char *const *srcs, size_t n, kiln_strv *out)
{
	for (size_t i = 0; i < n; i++) {
		const char *p = srcs[i];
		while (*p == '/' || (p[0] == '.' && p[1] == '/'))
			p++;
		char *c = kiln_xstrdup(p);
		size_t g = strcspn(c, "*?[\\");
		if (c[g]) {
			c[g] = '\0';
			char *slash = strrchr(c, '/');
			*(slash ? slash : c) = '\0';
		}
		size_t len = strlen(c);
		while (len && c[len - 1] == '/')
			c[--len] = '\0';
		bool bad = !len || !strcmp(c, ".") || strstr(c, "//") || strstr(c, "/./") || strstr(c, "..") ||
			   (len >= 2 && !strcmp(c + len - 2, "/."));
		if (bad) {
			free(c);
			return false;
		}
		kiln_strv_push_owned(out, c);
	}
	return n > 0;
}

/* Extract only what srcs can name from layers into a fresh scratch dir; 1
 * when the whole tree is needed after all. */
static int partial_tree(struct run *r, const struct build_layer *layers, size_t n, const char *const *srcs,
			size_t n_srcs, build_tree **part, kiln_error **err)
{
	kiln_strv pre = KILN_STRV_INIT;
	char *dir = NULL;
	int rc = 1;

	if (!srcs || !source_prefixes(srcs, n_srcs, &pre))
		goto out;
	dir = kiln_xasprintf("%s/part-%u", r->scratch, r->n_part++);
	rc = build_layers_extract_only(r->s, layers, n, dir, (const char *const *)pre.v, pre.n, err);
	if (rc == 0) {
		build_tree *t = NULL;
		if ((rc = build_tree_open(dir, NULL, &t, err)) == 0) {
			build_tree_free(*part);
			*part = t;
		}
	}
	if (rc == 1)
		kiln_rm_rf(dir, NULL);
out:
	kiln_strv_free(&pre);
	free(dir);
	return rc;
}

int build_source_tree_for(struct run *r, int from_stage, const char *from_image, const char *const *srcs,
			  size_t n_srcs, const build_tree **tree, bool *keep_owner, kiln_error **err)
{
	*keep_owner = false;
	if (from_stage >= 0) {
		struct stage_state *from = &r->st[from_stage];
		if (!from->built)
			return kiln_err(err, KILN_E_INVALID, "stage %d is not built", from_stage);
		if (!from->files) {
			int rc = partial_tree(r, from->layers, from->n_layers, srcs, n_srcs, &from->part, err);
			if (rc < 0)
				return -1;
			if (rc == 0) {
				*tree = from->part;
				*keep_owner = true;
				return 0;
			}
			char *dir = kiln_xasprintf("%s/stage-%d", r->scratch, from_stage);
			rc = build_layers_extract(r->s, from->layers, from->n_layers, dir, err);
			if (rc == 0)
				rc = build_tree_open(dir, NULL, &from->files, err);
			free(dir);
			if (rc < 0)
				return -1;
		}
		*tree = from->files;
		*keep_owner = true;
		return 0;
	}
	if (from_image) {
		struct img_slot *slot;
		if (load_image(r, from_image, &slot, err) < 0)
			return -1;
		if (!slot->files) {
			int rc = partial_tree(r, slot->im->layers, slot->im->n_layers, srcs, n_srcs, &slot->part, err);
			if (rc < 0)
				return -1;
			if (rc == 0) {
				*tree = slot->part;
				*keep_owner = true;
				return 0;
			}
			char *dir = kiln_xasprintf("%s/image-%zu", r->scratch, (size_t)(slot - r->imgs));
			rc = build_layers_extract(r->s, slot->im->layers, slot->im->n_layers, dir, err);
			if (rc == 0)
				rc = build_tree_open(dir, NULL, &slot->files, err);
			free(dir);
			if (rc < 0)
				return -1;
		}
		*tree = slot->files;
		*keep_owner = true;
		return 0;
	}
	if (!r->context && build_tree_open(r->o->context, r->ig, &r->context, err) < 0)
		return -1;
	*tree = r->context;
	return 0;
}

int build_source_tree(struct run *r, int from_stage, const char *from_image, const build_tree **tree,
		      bool *keep_owner, kiln_error **err)
{
	return build_source_tree_for(r, from_stage, from_image, NULL, 0, tree, keep_owner, err);
}

static int copy_step(struct run *r, struct stage_state *ss, const struct df_step *st, const char *text,
		     bool *cached, kiln_error **err)
{
	struct build_changes ch = { 0 };
	struct build_copy_opts o = { .add = st->kind == DF_ADD, .workdir = st->workdir, .scratch = r->scratch,
				     .unpack = -1, .public_urls = r->o->public_urls };
	kiln_strv excl = KILN_STRV_INIT, hn = KILN_STRV_INIT, hb = KILN_STRV_INIT;
	const build_tree *tree = NULL;
	build_tree *empty = NULL;
	int rc = -1;

	if (st->args.n < 2) {
		kiln_err(err, KILN_E_INVALID, "%s requires at least two arguments", st->kind == DF_ADD ? "ADD" : "COPY");
		goto out;
	}
	for (size_t i = 0; i < st->n_flags; i++) {
		const char *k = st->flags[i].key;
		if (strcmp(k, "exclude") == 0)
			kiln_strv_push(&excl, st->flags[i].value);
		else if (strcmp(k, "parents") == 0)
			o.parents = strcmp(st->flags[i].value, "false") != 0;
		else if (strcmp(k, "unpack") == 0)
			o.unpack = strcmp(st->flags[i].value, "false") != 0;
	}
	o.chown = build_step_flag(st, "chown");
	o.chmod = build_step_flag(st, "chmod");
	o.checksum = build_step_flag(st, "checksum");
	if (o.chown && !o.chown[0])
		o.chown = NULL;
	if (o.chmod && !o.chmod[0])
		o.chmod = NULL;
	o.excludes = (const char *const *)excl.v;
	o.n_excludes = excl.n;
	for (size_t i = 0; i < st->n_heredocs; i++) {
		kiln_strv_push(&hn, st->heredocs[i].name);
		kiln_strv_push(&hb, st->heredocs[i].content);
	}
	o.heredoc_names = (const char *const *)hn.v;
	o.heredoc_bodies = (const char *const *)hb.v;
	o.n_heredocs = hn.n;
	bool all_heredoc = true;
	for (size_t i = 0; i + 1 < st->args.n; i++)
		all_heredoc = all_heredoc && strncmp(st->args.v[i], "<<", 2) == 0 && st->n_heredocs;
	if (all_heredoc)
		tree = NULL;
	else if (build_source_tree_for(r, st->from_stage, st->from_image, (const char *const *)st->args.v,
				       st->args.n - 1, &tree, &o.keep_owner, err) < 0)
		goto out;
	if (!tree) {
		if (build_tree_open(r->scratch, NULL, &empty, err) < 0)
			goto out;
		tree = empty;
	}
	if (build_stage_index(r, ss, err) < 0)
		goto out;
	rc = build_copy_resolve(tree, (const char *const *)st->args.v, st->args.n - 1, st->args.v[st->args.n - 1], &o,
				ss->idx, &ch, err);
	if (rc < 0)
		goto out;
	build_changes_finish(&ch);
	build_changes_add_parents(&ch, ss->idx);
	rc = layer_step(r, ss, text, &ch, cached, err);
out:
	build_tree_free(empty);
	build_changes_free(&ch);
	kiln_strv_free(&excl);
	kiln_strv_free(&hn);
	kiln_strv_free(&hb);
	return rc;
}

/* WORKDIR creates the directory when the image lacks it (a layer, as BuildKit). */
static int workdir_step(struct run *r, struct stage_state *ss, const struct df_step *st, const char *text,
			bool *cached, bool *layer, kiln_error **err)
{
	if (build_stage_index(r, ss, err) < 0)
		return -1;
	char *path = build_fsindex_resolve(ss->idx, st->workdir ? st->workdir : "/", true);
	struct build_changes ch = { 0 };
	int rc = 0;

	*layer = false;
	for (char *q = path; *q; q++) {
		if (q[1] != '/' && q[1] != '\0')
			continue;
		char save = q[1];
		q[1] = '\0';
		const struct build_fsnode *n = build_fsindex_get(ss->idx, path);
		if (n && !S_ISDIR(n->mode)) {
			rc = kiln_err(err, KILN_E_INVALID, "WORKDIR %s: /%s is not a directory", st->workdir, path);
			q[1] = save;
			goto out;
		}
		if (!n) {
			if (ch.n == ch.cap) {
				ch.cap = ch.cap ? 2 * ch.cap : 8;
				ch.v = kiln_xrealloc(ch.v, ch.cap * sizeof(*ch.v));
			}
			struct build_item *it = &ch.v[ch.n++];
			memset(it, 0, sizeof(*it));
			it->dest = kiln_xstrdup(path);
			it->mode = it->src_mode = S_IFDIR | 0755;
		}
		q[1] = save;
	}
	if (ch.n) {
		*layer = true;
		build_changes_add_parents(&ch, ss->idx);
		rc = layer_step(r, ss, text, &ch, cached, err);
	}
out:
	build_changes_free(&ch);
	free(path);
	return rc;
}

static int start_stage(struct run *r, const struct df_stage *sg, struct stage_state *ss, char **pin,
		       kiln_error **err)
{
	ss->idx = build_fsindex_new();
	if (sg->base_stage >= 0) {
		struct stage_state *from = &r->st[sg->base_stage];
		ss->config = json_deep_copy(from->config);
		memcpy(ss->key, from->key, KILN_DIGEST_MAX);
		for (size_t i = 0; i < from->n_layers; i++)
			if (build_add_layer(r, ss, &from->layers[i], err) < 0)
				return -1;
		*pin = kiln_xstrdup("");
		return 0;
	}
	if (strcmp(sg->base, "scratch") == 0) {
		ss->config = build_config_scratch();
		build_cache_key(NULL, "FROM scratch", NULL, ss->key, err);
		*pin = kiln_xstrdup("");
		return 0;
	}
	struct img_slot *slot;
	if (load_image(r, sg->base, &slot, err) < 0)
		return -1;
	ss->config = json_deep_copy(slot->im->config);
	/* the base's own config carries on; its OnBuild triggers (the plan made
	 * them this stage's first steps) are consumed */
	json_object_del(json_object_get(ss->config, "config"), "OnBuild");
	char *text = kiln_xasprintf("FROM %s", slot->im->manifest_digest);
	build_cache_key(NULL, text, NULL, ss->key, err);
	free(text);
	for (size_t i = 0; i < slot->im->n_layers; i++)
		if (build_add_layer(r, ss, &slot->im->layers[i], err) < 0)
			return -1;
	*pin = kiln_xasprintf("@%s", slot->im->manifest_digest);
	return 0;
}

static int build_stage(struct run *r, int index, kiln_error **err)
{
	const struct df_stage *sg = &r->plan->stages[index];
	struct stage_state *ss = &r->st[index];
	char label[32];
	const char *stage_name = sg->name;
	char *pin = NULL;
	double t0 = kiln_now_ms() / 1e3;
	int rc = -1;

	if (!stage_name) {
		snprintf(label, sizeof(label), "%d", index);
		stage_name = label;
	}
	char *from_text = kiln_xasprintf("FROM %s", sg->base);
	struct build_event ev = { .kind = BUILD_EV_STEP, .step = ++r->step, .total = r->total, .stage = stage_name,
				  .instruction = from_text, .file = r->ast->file,
				  .line = sg->node ? sg->node->start_line : 0 };
	build_emit(r, &ev);
	if (start_stage(r, sg, ss, &pin, err) < 0) {
		kiln_error_wrap(err, "%s:%d: [%d/%d] %s", r->ast->file, ev.line, ev.step, ev.total, from_text);
		free(from_text);
		goto out;
	}
	ss->n_base = ss->n_layers;
	char *pinned = kiln_xasprintf("%s%s", from_text, pin);
	ev.kind = BUILD_EV_STEP_DONE;
	ev.instruction = pinned;
	ev.seconds = kiln_now_ms() / 1e3 - t0;
	build_emit(r, &ev);
	free(pinned);
	free(from_text);
	for (size_t i = 0; i < sg->n_steps; i++) {
		const struct df_step *st = &sg->steps[i];
		char *text = step_text(st);
		bool cached = false, layer = false;
		int src;

		t0 = kiln_now_ms() / 1e3;
		ev = (struct build_event){ .kind = BUILD_EV_STEP, .step = ++r->step, .total = r->total,
					   .stage = stage_name, .instruction = text, .file = r->ast->file,
					   .line = st->node ? st->node->start_line : 0 };
		build_emit(r, &ev);
		switch (st->kind) {
		case DF_COPY:
		case DF_ADD:
			src = copy_step(r, ss, st, text, &cached, err);
			layer = true;
			break;
		case DF_RUN:
			src = build_run_step(r, ss, sg, i, text, &cached, err);
			layer = true;
			break;
		case DF_WORKDIR:
			src = workdir_step(r, ss, st, text, &cached, &layer, err);
			if (src == 0)
				src = build_config_step(ss->config, st, &ss->cmd_set, err);
			if (src == 0 && !layer)
				key_chain(ss->key, text);
			break;
		case DF_ARG:
			src = 0;
			key_chain(ss->key, text);
			break;
		default:
			src = build_config_step(ss->config, st, &ss->cmd_set, err);
			key_chain(ss->key, text);
			break;
		}
		if (src < 0) {
			kiln_error_wrap(err, "%s:%d: [%d/%d] %s", r->ast->file, ev.line, ev.step, ev.total, text);
			free(text);
			goto out;
		}
		if (st->kind != DF_ARG) {
			char *by = layer ? kiln_xasprintf("%s # buildkit", text) : kiln_xstrdup(text);
			build_config_history(ss->config, r->created, by, !layer);
			free(by);
		}
		r->cached += cached;
		ev.kind = BUILD_EV_STEP_DONE;
		ev.has_cache = layer;
		ev.cached = cached;
		ev.run = r->last_run_valid ? &r->last_run : NULL;
		r->last_run_valid = false;
		ev.seconds = kiln_now_ms() / 1e3 - t0;
		build_emit(r, &ev);
		free(text);
	}
	ss->built = true;
	rc = 0;
out:
	build_stage_end(r, ss);
	free(pin);
	return rc;
}

static void set_created(struct run *r)
{
	const char *sde = getenv("SOURCE_DATE_EPOCH");
	int64_t t = sde && *sde ? (int64_t)strtoll(sde, NULL, 10) : (int64_t)time(NULL);

	kiln_time_rfc3339(t, r->created);
}

/* The tag part of NAME[:TAG] for the OCI layout's ref.name. */
static char *tag_of(const char *name)
{
	struct kiln_ref r;
	char *t;

	if (kiln_ref_parse(name, &r, NULL) < 0)
		return kiln_xstrdup("latest");
	t = kiln_xstrdup(r.tag ? r.tag : "latest");
	kiln_ref_free(&r);
	return t;
}

/* Scratch directories of builds that were killed (their pid is gone): a
 * killed build cannot clean up after itself, the next one does. */
static void sweep_stale(struct run *r)
{
	char *tmp = kiln_home_path(build_store_home(r->s), KILN_PATH_TMP, NULL);
	DIR *d = opendir(tmp);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "build-", 6) != 0)
			continue;
		char *dir = kiln_path_join(tmp, de->d_name), *pidf = kiln_path_join(dir, "pid"), *data = NULL;
		size_t len = 0;
		kiln_error *e = NULL;
		if (kiln_read_file(pidf, &data, &len, 64, &e) == 0 && len && data[len - 1] == '\n') {
			long pid = strtol(data, NULL, 10);
			if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH && kiln_rm_rf(dir, &e) == 0)
				kiln_debug("build: removed %s, left by a killed build", dir);
		}
		kiln_error_free(e);
		free(data);
		free(pidf);
		free(dir);
	}
	if (d)
		closedir(d);
	free(tmp);
}

static int load_ignore(struct run *r, const char *dockerfile, kiln_error **err)
{
	/* BuildKit prefers DOCKERFILE.dockerignore next to the Dockerfile */
	if (dockerfile && strcmp(dockerfile, "-") != 0) {
		char *own = kiln_xasprintf("%s.dockerignore", dockerfile);
		if (access(own, F_OK) == 0) {
			int rc = build_ignore_load(own, &r->ig, err);
			free(own);
			return rc;
		}
		free(own);
	}
	char *p = kiln_path_join(r->o->context, ".dockerignore");
	int rc = build_ignore_load(p, &r->ig, err);
	free(p);
	return rc;
}

/* What provenance records of a build's inputs: the context as this build
 * read it (through .dockerignore) and the images it resolved. */
static int record_inputs(struct run *r, struct build_result *res, kiln_error **err)
{
	if (!r->context && build_tree_open(r->o->context, r->ig, &r->context, err) < 0)
		return -1;
	if (build_context_digest(r->s, r->context, res->context_digest, err) < 0)
		return -1;
	res->bases = kiln_xcalloc(r->n_imgs + 1, sizeof(*res->bases));
	for (size_t i = 0; i < r->n_imgs; i++) {
		res->bases[i].ref = kiln_xstrdup(r->imgs[i].ref);
		snprintf(res->bases[i].digest, KILN_DIGEST_MAX, "%s", r->imgs[i].im->manifest_digest);
	}
	res->n_bases = r->n_imgs;
	return 0;
}

void build_result_free(struct build_result *res)
{
	for (size_t i = 0; i < res->n_bases; i++)
		free(res->bases[i].ref);
	free(res->bases);
	res->bases = NULL;
	res->n_bases = 0;
}

int build_run(const struct build_options *o, struct build_result *res, kiln_error **err)
{
	struct run r = { .o = o };
	char *dockerfile = o->dockerfile ? kiln_xstrdup(o->dockerfile) : kiln_path_join(o->context, "Dockerfile");
	struct df_plan_opts po = { .build_args = o->build_args, .n_build_args = o->n_build_args,
				   .target = o->target, .image_config = image_config_hook, .image_ctx = &r };
	int rc = -1;

	memset(res, 0, sizeof(*res));
	set_created(&r);
	if (build_store_open(o->home, &r.s, err) < 0 || build_store_lock(r.s, false, err) < 0)
		goto out;
	r.scratch = kiln_home_path(build_store_home(r.s), KILN_PATH_TMP, "build-XXXXXX");
	if (!mkdtemp(r.scratch)) {
		kiln_err_errno(err, errno, "build scratch directory");
		free(r.scratch);
		r.scratch = NULL;
		goto out;
	}
	/* not synced: after a crash its build is gone either way, and a reader
	 * takes only a whole line (sweep_stale) */
	char *pidf = kiln_path_join(r.scratch, "pid"), pid[32];
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	int pfd = open(pidf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (pfd < 0 || kiln_write_full(pfd, pid, strlen(pid)) < 0) {
		kiln_err_errno(err, errno, "write %s", pidf);
		if (pfd >= 0)
			close(pfd);
		free(pidf);
		goto out;
	}
	close(pfd);
	free(pidf);
	sweep_stale(&r);
	if (o->context_digests) {
		json_t *known = kiln_json_load_file(o->context_digests, err);
		if (known == NULL || !json_is_object(known)) {
			json_decref(known);
			if (*err == NULL)
				kiln_err(err, KILN_E_INVALID, "%s: want a JSON object of PATH: DIGEST", o->context_digests);
			kiln_error_wrap(err, "--context-digests");
			goto out;
		}
		build_store_known_digests(r.s, o->context, known);
		json_decref(known);
	}
	if (df_parse_file(dockerfile, &r.ast, err) < 0 || df_plan_build(r.ast, &po, &r.plan, err) < 0 ||
	    load_ignore(&r, dockerfile, err) < 0)
		goto out;
	r.st = kiln_xcalloc(r.plan->n_stages, sizeof(*r.st));
	for (size_t i = 0; i < r.plan->n_order; i++)
		r.total += 1 + (int)r.plan->stages[r.plan->order[i]].n_steps;
	for (size_t i = 0; i < r.plan->n_order; i++)
		if (build_stage(&r, r.plan->order[i], err) < 0)
			goto out;
	struct stage_state *t = &r.st[r.plan->target];
	if (build_image_commit(r.s, t->config, t->layers, t->n_layers, r.created, res->manifest, res->config, err) < 0)
		goto out;
	for (size_t i = 0; i < o->n_tags; i++)
		if (build_store_tag(r.s, o->tags[i], res->manifest, err) < 0)
			goto out;
	if (o->oci_out) {
		char *ref = tag_of(o->n_tags ? o->tags[0] : "latest");
		int erc = build_oci_export(r.s, res->manifest, o->oci_out, ref, err);
		free(ref);
		if (erc < 0)
			goto out;
	}
	if (o->template) {
		char *rootfs = o->rootfs_out ? kiln_xstrdup(o->rootfs_out) : kiln_xasprintf("%s/template.ext4", r.scratch);
		int trc = build_template_make(r.s, res->manifest, o->template, rootfs, res->template_digest, err);
		free(rootfs);
		if (trc < 0)
			goto out;
	} else if (o->rootfs_out && build_rootfs_write(r.s, res->manifest, o->rootfs_out, err) < 0) {
		goto out;
	}
	if (o->record_inputs && record_inputs(&r, res, err) < 0)
		goto out;
	res->steps = (size_t)r.step;
	res->cached = r.cached;
	struct build_event ev = { .kind = BUILD_EV_DONE, .step = r.step, .total = r.total, .digest = res->manifest,
				  .template_digest = res->template_digest };
	build_emit(&r, &ev);
	rc = 0;
out:
	if (r.scratch) {
		kiln_error *e2 = NULL;
		if (kiln_rm_rf(r.scratch, &e2) < 0)
			kiln_error_free(e2);
		free(r.scratch);
	}
	for (size_t i = 0; r.st && i < r.plan->n_stages; i++) {
		build_stage_end(&r, &r.st[i]);
		json_decref(r.st[i].config);
		free(r.st[i].layers);
		build_fsindex_free(r.st[i].idx);
		build_tree_free(r.st[i].files);
		build_tree_free(r.st[i].part);
	}
	free(r.st);
	for (size_t i = 0; i < r.n_imgs; i++) {
		free(r.imgs[i].ref);
		build_image_free(r.imgs[i].im);
		build_tree_free(r.imgs[i].files);
		build_tree_free(r.imgs[i].part);
	}
	free(r.imgs);
	build_tree_free(r.context);
	build_ignore_free(r.ig);
	df_plan_free(r.plan);
	df_ast_free(r.ast);
	build_store_close(r.s);
	free(dockerfile);
	if (rc < 0)
		build_result_free(res);
	return rc;
}
