/* tmpl_xfer.c — the template path of `kiln push` / `kiln pull`: the registry
 * library moves the chunks (registry/tmpl_xfer.c); this prints one summary
 * line on stderr with the bytes moved and, with --json, a final "done" event
 * carrying the byte counts (progress: cli/xfer.c, no event per chunk). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/xfer.h"
#include "snapshots/snapshots.h"

static void human(char *out, size_t n, double bytes)
{
	const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;
	while (bytes >= 1024 && i < 4) {
		bytes /= 1024;
		i++;
	}
	snprintf(out, n, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
}

static int done(struct cli_xfer *x, bool push, const char *ref, const struct reg_tmpl_stats *st, const char *local)
{
	char moved[32], total[32];
	kiln_error *err = NULL;

	cli_xfer_end_line(x);
	human(moved, sizeof(moved), (double)st->bytes_moved);
	human(total, sizeof(total), (double)st->bytes_total);
	fprintf(stderr, "%s template %s: %s %s of %s (%.1f%%), %zu of %zu blobs, %.1fs\n", push ? "push" : "pull",
		local ? local : ref, push ? "sent" : "received", moved, total,
		st->bytes_total ? 100.0 * (double)st->bytes_moved / (double)st->bytes_total : 0.0, st->blobs_moved,
		st->blobs_total, st->seconds);
	if (x->json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "event", "done", "kind", "template",
				      "digest", st->manifest_digest, "ref", ref, "bytes_total", (json_int_t)st->bytes_total,
				      "bytes_moved", (json_int_t)st->bytes_moved, "blobs_total", (json_int_t)st->blobs_total,
				      "blobs_moved", (json_int_t)st->blobs_moved, "seconds", cli_xfer_elapsed(x));
		if (local) {
			json_object_set_new(j, "name", json_string(local));
			json_object_set_new(j, "template", json_string(st->template_digest));
		}
		cli_xfer_event(j);
	} else {
		printf("%s\n", local ? st->template_digest : st->manifest_digest);
	}
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		return cli_fail(err);
	}
	return KILN_EXIT_OK;
}

bool cli_is_template(const char *ref)
{
	kiln_error *e = NULL;
	snap_template *t = snap_template_open(ref, &e);
	bool yes = t != NULL;

	kiln_error_free(e);
	snap_template_free(t);
	return yes;
}

int cli_tmpl_push(const char *ref, const char *dest, struct cli_xfer *x)
{
	struct reg_imgref r = { 0 };
	struct reg_tmpl_stats st = { 0 };
	struct reg_tmpl_xfer_opts o = { .parallel = x->parallel, .progress = cli_xfer_progress, .ud = x };
	reg_client *c = NULL;
	kiln_error *err = NULL;
	int rc;

	cli_xfer_start(x, "push template", false);
	if (reg_imgref_parse(dest, &r, &err) < 0 || (c = reg_client_new(r.host, NULL, &err)) == NULL ||
	    reg_tmpl_push(c, ref, r.repo, reg_imgref_reference(&r), &o, &st, &err) < 0) {
		cli_xfer_end_line(x);
		rc = cli_fail(err);
	} else {
		rc = done(x, true, dest, &st, NULL);
	}
	reg_client_free(c);
	reg_imgref_free(&r);
	return rc;
}

int cli_tmpl_pull(const char *src, struct cli_xfer *x)
{
	struct reg_imgref r = { 0 };
	struct reg_doc m = { 0 };
	struct reg_tmpl_stats st = { 0 };
	struct reg_tmpl_xfer_opts o = { .parallel = x->parallel, .progress = cli_xfer_progress, .ud = x };
	reg_client *c = NULL;
	kiln_error *err = NULL;
	char *local = NULL;
	int rc = -1;

	cli_xfer_start(x, "pull template", false);
	if (reg_imgref_parse(src, &r, &err) < 0 || (c = reg_client_new(r.host, NULL, &err)) == NULL ||
	    reg_manifest_get(c, r.repo, reg_imgref_reference(&r), NULL, &m, &err) < 0) {
		/* Not ours to report: the image path says it again, or succeeds. */
		kiln_error_free(err);
		goto out;
	}
	if (!reg_tmpl_is_artifact(m.data, m.len))
		goto out;
	local = x->name ? kiln_xstrdup(x->name) : kiln_xasprintf("%s:%s", r.repo, r.tag ? r.tag : "latest");
	if (reg_tmpl_pull(c, r.repo, &m, local, &o, &st, &err) < 0) {
		cli_xfer_end_line(x);
		rc = cli_fail(err);
		goto out;
	}
	rc = done(x, false, src, &st, local);
	/* A template made on another kind of host is refused at restore: say so now. */
	snap_template *t = snap_template_open(local, &err);
	if (t && snap_template_check(t, false, &err) < 0)
		fprintf(stderr, "kiln pull: warning: this host cannot restore %s: %s\n", local, kiln_error_message(err));
	kiln_error_free(err);
	snap_template_free(t);
out:
	free(local);
	reg_doc_free(&m);
	reg_client_free(c);
	reg_imgref_free(&r);
	return rc;
}
