/* cmd_build.c — `kiln build`: flags to build_options, progress to stderr as
 * "[2/7] COPY . /app" lines (cache hit/miss and time), or JSON events on
 * stdout with --json for CI.  Exit 1 names the failing step and line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "builder/builder.h"
#include "cli/build_flags.h"
#include "cli/cli.h"
#include "cli/xfer.h"
#include "remote/remote.h"

static void on_event(void *ud, const struct build_event *ev)
{
	bool json = *(bool *)ud;

	if (json) {
		json_t *j = NULL;
		switch (ev->kind) {
		case BUILD_EV_STEP:
			j = json_pack("{s:s,s:i,s:i,s:s,s:s,s:i}", "event", "step", "step", ev->step, "total", ev->total,
				      "stage", ev->stage, "instruction", ev->instruction, "line", ev->line);
			break;
		case BUILD_EV_STEP_DONE:
			j = json_pack("{s:s,s:i,s:i,s:s,s:s,s:i,s:f}", "event", "step_done", "step", ev->step, "total",
				      ev->total, "stage", ev->stage, "instruction", ev->instruction, "line", ev->line,
				      "seconds", ev->seconds);
			if (ev->has_cache)
				json_object_set_new(j, "cache", json_string(ev->cached ? "hit" : "miss"));
			if (ev->run)
				json_object_set_new(j, "run", json_pack("{s:f,s:f,s:f,s:f,s:f,s:b}", "ext4_seconds",
									ev->run->ext4_ms / 1e3, "boot_seconds",
									ev->run->boot_ms / 1e3, "sync_seconds",
									ev->run->sync_ms / 1e3, "exec_seconds",
									ev->run->exec_ms / 1e3, "capture_seconds",
									ev->run->capture_ms / 1e3, "booted", ev->run->booted));
			break;
		case BUILD_EV_VM:
			j = json_pack("{s:s,s:i,s:f,s:f,s:b,s:b}", "event", "vm", "step", ev->step, "boot_seconds",
				      ev->run->boot_ms / 1e3, "ext4_seconds", ev->run->ext4_ms / 1e3, "restored",
				      ev->run->restored, "base_restored", ev->run->base_restored);
			break;
		case BUILD_EV_DONE:
			j = json_pack("{s:s,s:s,s:i}", "event", "done", "digest", ev->digest, "steps", ev->step);
			if (ev->template_digest && ev->template_digest[0])
				json_object_set_new(j, "template", json_string(ev->template_digest));
			break;
		case BUILD_EV_OUTPUT:
			j = json_pack("{s:s,s:i,s:s%}", "event", "output", "step", ev->step, "data", ev->data, ev->len);
			break;
		}
		char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
		printf("%s\n", s);
		fflush(stdout);
		free(s);
		json_decref(j);
		return;
	}
	switch (ev->kind) {
	case BUILD_EV_STEP:
		fprintf(stderr, "[%d/%d] %s\n", ev->step, ev->total, ev->instruction);
		break;
	case BUILD_EV_STEP_DONE:
		if (ev->has_cache)
			fprintf(stderr, "  cache %s, %.2fs\n", ev->cached ? "hit" : "miss", ev->seconds);
		else if (strncmp(ev->instruction, "FROM ", 5) == 0 && strchr(ev->instruction, '@'))
			fprintf(stderr, "  %s %.2fs\n", strrchr(ev->instruction, '@') + 1, ev->seconds);
		break;
	case BUILD_EV_VM:
		if (ev->run->restored)
			fprintf(stderr, "  builder VM restored%s in %.2fs (stage uploaded %.2fs)\n",
				ev->run->base_restored ? " with its base" : "", ev->run->boot_ms / 1e3,
				ev->run->sync_ms / 1e3);
		else
			fprintf(stderr, "  builder VM started in %.2fs (stage as ext4 %.2fs)\n", ev->run->boot_ms / 1e3,
				ev->run->ext4_ms / 1e3);
		break;
	case BUILD_EV_DONE:
		break;
	case BUILD_EV_OUTPUT:
		fwrite(ev->data, 1, ev->len, stderr);
		break;
	}
}

static void on_other(void *ud, const json_t *ev)
{
	bool json = *(bool *)ud;
	const char *kind = json_string_value(json_object_get(ev, "event"));

	if (json) {
		char *s = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
		printf("%s\n", s);
		fflush(stdout);
		free(s);
	} else if (kind && strcmp(kind, "published") == 0) {
		fprintf(stderr, "published %s %s\n", json_string_value(json_object_get(ev, "ref")),
			json_string_value(json_object_get(ev, "digest")));
	} else if (kind && strcmp(kind, "status") == 0 && json_string_value(json_object_get(ev, "replay_of"))) {
		fprintf(stderr, "same inputs as build %s: its result, every step from the cache, nothing run\n",
			json_string_value(json_object_get(ev, "replay_of")));
	}
}

static void on_uploaded(void *ud, const struct remote_result *r)
{
	if (!*(bool *)ud)
		fprintf(stderr, "context: %zu entries, %zu files uploaded (%llu bytes in %.3f s), %llu bytes of requests\n",
			r->files, r->uploaded, (unsigned long long)r->bytes_sent, r->upload_s,
			(unsigned long long)r->bytes_request);
}

/* The secrets' bytes, read as a local build reads them (a file or a
 * variable, at most BuildKit's 500 KiB); wiped by free_secrets. */
static int read_secrets(const struct build_options *o, struct remote_secret **out, kiln_error **err)
{
	struct remote_secret *v = kiln_xcalloc(o->n_secrets + 1, sizeof(*v));

	*out = v;
	for (size_t i = 0; i < o->n_secrets; i++) {
		const struct build_secret *b = &o->secrets[i];
		v[i].id = b->id;
		if (b->env) {
			const char *e = getenv(b->env);
			if (e == NULL)
				return kiln_err(err, KILN_E_NOTFOUND, "secret %s: the variable %s is not set", b->id, b->env);
			v[i].data = kiln_xstrdup(e);
			v[i].len = strlen(e);
		} else {
			char *d = NULL;
			if (kiln_read_file(b->file, &d, &v[i].len, 500u * 1024u, err) < 0)
				return kiln_error_wrap(err, "secret %s", b->id);
			v[i].data = d;
		}
	}
	return 0;
}

static void free_secrets(struct remote_secret *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		if (v[i].data) {
			explicit_bzero((char *)v[i].data, v[i].len);
			free((char *)v[i].data);
		}
	free(v);
}

/* --oci-out / --rootfs-out after a remote build: the image it published,
 * pulled from the server's registry (into the local store, as kiln pull
 * does), then written out as a local build writes it. */
static int download(const char *url, const struct build_options *o, const struct remote_result *res,
		    kiln_error **err)
{
	const char *h = strstr(url, "://") ? strstr(url, "://") + 3 : url;
	char *ref = kiln_xasprintf("%.*s/%s", (int)strcspn(h, "/"), h, res->image), digest[KILN_DIGEST_MAX];
	const char *token = getenv("KILN_TOKEN");
	struct build_remote_opts ro = { .user = token && *token ? "kiln" : NULL, .pass = token && *token ? token : NULL };
	build_store *s = NULL;
	int ret = -1;

	if (build_store_open(NULL, &s, err) < 0 || build_image_pull(s, ref, &ro, digest, err) < 0)
		goto out;
	if (strcmp(digest, res->digest) != 0) {
		kiln_err(err, KILN_E_GENERIC, "%s is now %s, not the build's %s (tagged again meanwhile?)", ref, digest,
			 res->digest);
		goto out;
	}
	if (o->oci_out) {
		const char *t = o->tags[0], *colon = strrchr(t, ':');
		char *tag = kiln_xstrdup(colon && !strchr(colon, '/') ? colon + 1 : "latest");
		int rc = build_oci_export(s, digest, o->oci_out, tag, err);
		free(tag);
		if (rc < 0)
			goto out;
	}
	if (o->rootfs_out && build_rootfs_write(s, digest, o->rootfs_out, err) < 0)
		goto out;
	ret = 0;
out:
	if (ret < 0)
		kiln_error_wrap(err, "download %s", ref);
	build_store_close(s);
	free(ref);
	return ret;
}

/* --remote URL (or $KILN_BUILDER): the same build on a `kiln serve --build`. */
static int run_remote(const char *url, const struct build_options *o, const struct build_request *br, bool json)
{
	struct remote_secret *secrets = NULL;
	struct remote_request req = { .build = *br };
	struct remote_opts ro = { .url = url, .token = getenv("KILN_TOKEN"), .team = getenv("KILN_TEAM"),
				      .on_event = on_event, .on_other = on_other, .on_uploaded = on_uploaded,
				      .ud = &json };
	struct remote_result res;
	kiln_error *err = NULL;
	int rc;

	req.build.name = o->n_tags ? o->tags[0] : NULL;
	req.source_date_epoch = getenv("SOURCE_DATE_EPOCH"); /* as a local build takes it */
	rc = read_secrets(o, &secrets, &err);
	req.secrets = secrets;
	req.nsecrets = o->n_secrets;
	if (rc == 0)
		rc = remote_build(&ro, &req, o->context, o->dockerfile, &res, &err);
	free_secrets(secrets, o->n_secrets);
	if (rc == 0 && (o->oci_out || o->rootfs_out))
		rc = download(url, o, &res, &err);
	if (rc < 0) {
		if (json) {
			json_t *j = json_pack("{s:s,s:s}", "event", "error", "message", kiln_error_message(err));
			char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
			printf("%s\n", s);
			free(s);
			json_decref(j);
		}
		return cli_fail(err);
	}
	if (!json) {
		fprintf(stderr, "built %s (%zu steps, %zu cached) as build %s\n", res.digest, res.steps, res.cached, res.id);
		printf("%s\n", res.digest);
		if (res.template_digest[0])
			printf("%s\n", res.template_digest);
	}
	return fflush(stdout) == 0 ? KILN_EXIT_OK : KILN_EXIT_FAIL;
}

/* -t NAME[:TAG]: names, not digests. */
static int check_tags(const struct kiln_command *cmd, const kiln_strv *tags)
{
	kiln_error *err = NULL;

	for (size_t t = 0; t < tags->n; t++) {
		struct kiln_ref r;
		if (kiln_ref_parse(tags->v[t], &r, &err) < 0 || r.digest) {
			int rc = cli_usage_error(cmd, "invalid tag '%s': %s", tags->v[t],
						 err ? kiln_error_message(err) : "a name takes a tag, not a digest");
			kiln_ref_free(&r);
			kiln_error_free(err);
			return rc;
		}
		kiln_ref_free(&r);
	}
	return KILN_EXIT_OK;
}

/* The build here, in builder VMs: progress on stderr (or JSON events), the
 * image's digest (and the template's) on stdout. */
static int run_local(struct build_options *o, struct build_template_opts *tpl, const kiln_strv *tags, bool json,
		     bool provenance, const char *builder_id)
{
	struct build_result res;
	kiln_error *err = NULL;
	dist_prechunk *pc = NULL;

	/* the template is chunked for kiln push beside the build */
	tpl->on_rootfs = cli_prechunk_hook;
	tpl->on_rootfs_ud = &pc;

	o->on_event = on_event;
	o->executor = &build_executor_vm;
	/* ^C stops the builder VMs and removes their files */
	vm_cleanup_on_signals();
	o->event_ud = &json;
	o->record_inputs = provenance;
	double started = (double)time(NULL);
	int brc = build_run(o, &res, &err);
	cli_prechunk_end(&pc, brc < 0 ? NULL : res.template_digest);
	if (brc == 0 && provenance && cli_provenance_record(o, &res, started, (double)time(NULL), builder_id, &err) < 0)
		brc = -1;
	build_result_free(&res);
	if (brc < 0) {
		if (json) {
			json_t *j = json_pack("{s:s,s:s}", "event", "error", "message", kiln_error_message(err));
			char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
			printf("%s\n", s);
			free(s);
			json_decref(j);
		}
		return cli_fail(err);
	}
	if (!json) {
		fprintf(stderr, "built %s (%zu steps, %zu cached)\n", res.manifest, res.steps, res.cached);
		printf("%s\n", res.manifest);
		if (res.template_digest[0]) {
			fprintf(stderr, "template %s\n", res.template_digest);
			printf("%s\n", res.template_digest);
		} else if (tags->n) {
			/* the image alone does not run: say so before it travels */
			fprintf(stderr, "%s is an image; kiln run needs a template: add --template, or `kiln snapshot %s`\n",
				tags->v[0], tags->v[0]);
		}
	}
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		return cli_fail(err);
	}
	return KILN_EXIT_OK;
}

/* --request FILE: the build's fields as JSON (what the build service hands
 * its child, builder/request.h), in place of their flags. */
static int load_request(const struct kiln_command *cmd, const char *file, struct build_request *r)
{
	kiln_error *e = NULL, **err = &e;
	json_t *j;
	int rc;

	for (size_t i = 0; i < build_nfields; i++)
		if (build_field_is_set(r, &build_fields[i]))
			return cli_usage_error(cmd, "--request %s holds the build's options: --%s given too", file,
					       build_fields[i].flag ? build_fields[i].flag : build_fields[i].key);
	if ((j = kiln_json_load_file(file, err)) == NULL) {
		kiln_error_wrap(err, "--request");
		return cli_fail(e);
	}
	rc = build_request_from_json(j, true, r, err);
	json_decref(j);
	if (rc < 0) {
		kiln_error_wrap(err, "--request %s", file);
		return cli_fail(e);
	}
	return KILN_EXIT_OK;
}

#define OPTS_MAX 40

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	struct build_options o = { 0 };
	struct build_template_opts tpl = { 0 };
	struct build_request br = { 0 };
	kiln_strv tags = KILN_STRV_INIT;
	struct cli_build_flags bf = { 0 };
	kiln_error *err = NULL;
	bool json = false;
	const char *remote = getenv("KILN_BUILDER"), *request = NULL, *builder_id = NULL;
	int i, rc;
	struct cli_option opts[OPTS_MAX] = {
		CLI_STRING('f', "file", &o.dockerfile, "FILE", "the Dockerfile (- for standard input)"),
		CLI_STRV('t', "tag", &tags, "NAME[:TAG]", "store the image under this name (repeatable)"),
		CLI_CALLBACK(0, "secret", &bf, "id=ID,src=FILE", cli_build_secret,
			     "a secret for RUN --mount=type=secret,id=ID (also env=VAR,\n"
			     "type=file|env; bare id=ID: $ID if set, else the file ID);\n"
			     "never in a layer, the cache key, the log or a snapshot"),
		CLI_CALLBACK(0, "ssh", &bf, "default|ID[=SOCKET]", cli_build_ssh,
			     "an ssh-agent for RUN --mount=type=ssh (default:\n"
			     "$SSH_AUTH_SOCK), relayed into the builder VM"),
		CLI_STRING(0, "builder-id", &builder_id, "ID", "the builder --provenance names (default kiln@HOSTNAME; the build\n"
			   "service's children: kiln-serve@HOSTNAME or build.builder_id).  A\n"
			   "claim of the signer: a policy's builder is as good as its keys"),
		CLI_STRING(0, "oci-out", &o.oci_out, "DIR", "also write an OCI image layout to DIR"),
		CLI_STRING(0, "rootfs-out", &o.rootfs_out, "FILE", "also write the image's filesystem as ext4 (rootfs stage)"),
		CLI_BOOL(0, "json", &json, "one JSON event per line on stdout (step, step_done, output,\n"
					   "vm, done, error)"),
		CLI_STRING(0, "remote", &remote, "URL", "build on a `kiln serve --build` (also $KILN_BUILDER): only the\n"
							"files it lacks are sent; same output; the result is published\n"
							"as TEAM/NAME:TAG there ($KILN_TOKEN, $KILN_TEAM; docs/service.md)"),
		CLI_STRING(0, "request", &request, "FILE", "the build's options as JSON, in place of their flags (what the\n"
							  "build service hands the process that builds)"),
	};
	size_t n = 0;

	while (opts[n].long_name)
		n++;
	if (n + build_nfields >= OPTS_MAX) { /* a row added to the request's table: more room here */
		kiln_err(&err, KILN_E_GENERIC, "kiln build: more than %d options", OPTS_MAX);
		return cli_fail(err);
	}
	n += cli_build_request_options(&br, &bf, opts + n);
	opts[n] = (struct cli_option)CLI_END;
	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	rc = KILN_EXIT_USAGE;
	if (i >= argc) {
		rc = cli_usage_error(cmd, "missing CONTEXT directory");
		goto out;
	}
	if (i + 1 < argc) {
		rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[i + 1]);
		goto out;
	}
	if ((rc = check_tags(cmd, &tags)) != KILN_EXIT_OK)
		goto out;
	br.build_args = bf.args;
	br.n_build_args = bf.n_args;
	if (request && (rc = load_request(cmd, request, &br)) != KILN_EXIT_OK)
		goto out;
	if (request && br.name && !tags.n)
		kiln_strv_push(&tags, br.name);
	if (build_request_options(&br, &o, &tpl, &err) < 0) {
		rc = cli_usage_error(cmd, "%s", kiln_error_message(err));
		kiln_error_clear(&err);
		goto out;
	}
	o.context = argv[i];
	o.tags = (const char *const *)tags.v;
	o.n_tags = tags.n;
	o.secrets = bf.secrets;
	o.n_secrets = bf.n_secrets;
	o.ssh = bf.ssh;
	o.n_ssh = bf.n_ssh;
	tpl.name = tags.n ? tags.v[0] : NULL;
	if (remote && *remote) {
		if (bf.n_ssh) {
			rc = cli_usage_error(cmd, "--ssh is not forwarded to a remote build: its builder VM runs on the "
					     "server, and relaying your ssh-agent there would let the server sign with "
					     "your keys while the build runs; give the build a key or token of its own "
					     "with --secret instead (docs/service.md)");
			goto out;
		}
		if ((o.oci_out || o.rootfs_out) && !tags.n) {
			rc = cli_usage_error(cmd, "--oci-out and --rootfs-out with --remote download the published result: "
					     "give it a name with -t NAME[:TAG]");
			goto out;
		}
		rc = run_remote(remote, &o, &br, json);
		goto out;
	}
	if (builder_id && (!br.provenance || (remote && *remote))) {
		rc = cli_usage_error(cmd, "--builder-id names a local --provenance build's builder (a remote build's "
				     "is the service's own)");
		goto out;
	}
	rc = run_local(&o, &tpl, &tags, json, br.provenance, builder_id);
out:
	build_request_free(&br);
	kiln_strv_free(&tags);
	cli_build_flags_free(&bf);
	return rc;
}

const struct kiln_command kiln_cmd_build = {
	.name = "build",
	.summary = "build an image from a Dockerfile",
	.usage = "Usage: kiln build [-f Dockerfile] [-t NAME[:TAG]]... [--build-arg K=V]... [--target STAGE]\n"
		 "                  [--no-cache] [--oci-out DIR] [--rootfs-out FILE] [--compression gzip|zstd|none]\n"
		 "                  [--secret id=ID[,src=FILE|,env=VAR]]... [--ssh default|ID[=SOCKET]]...\n"
		 "                  [--template] [--start-cmd CMD] [--ready-cmd CMD] [--ready-timeout SECS]\n"
		 "                  [--cpus N] [--memory MiB] [--template-network none|outbound]\n"
		 "                  [--json] CONTEXT\n\n"
		 "Build the Dockerfile (default CONTEXT/Dockerfile) with CONTEXT as the build\n"
		 "context (.dockerignore honoured).  Bases: scratch, oci:DIR[:TAG],\n"
		 "oci-archive:FILE[:TAG], docker-archive:FILE, or a local kiln image by name;\n"
		 "pinned by digest.  Steps are cached by content; RUN runs in the stage's builder\n"
		 "microVM (one per stage, restored from a snapshot; each RUN in an overlay of its\n"
		 "own whose upper directory becomes the layer).  Progress goes to stderr; the\n"
		 "manifest digest is printed on stdout.\n",
	.run = run,
};
