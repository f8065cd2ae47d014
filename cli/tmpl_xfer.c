/* tmpl_xfer.c — the template path of `kiln push` / `kiln pull`: the registry
 * library moves the chunks (registry/tmpl_xfer.c); this draws progress on a
 * terminal (blobs, bytes, rate, ETA), prints one summary line on stderr with
 * the bytes moved, and with --json progress events (at most ~10/s, not one
 * per chunk) and a final "done" event carrying the byte counts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/tmpl_xfer.h"
#include "registry/registry.h"
#include "snapshots/snapshots.h"

struct view {
	bool json, tty, drawn;
	const char *verb;
	struct timespec t0;
};

static double elapsed(const struct view *v)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - v->t0.tv_sec) + (double)(t.tv_nsec - v->t0.tv_nsec) / 1e9;
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
	printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(j);
}

static void on_progress(void *ud, const struct reg_progress *p)
{
	struct view *v = ud;

	if (p->digest && p->blobs_done < p->blobs_total)
		return; /* thousands of chunks: the periodic updates are enough */
	if (v->json) {
		json_t *j = reg_progress_json(p, elapsed(v));
		json_object_set_new(j, "event", json_string("progress"));
		print_json(j);
	} else if (v->tty) {
		kiln_buf b = KILN_BUF_INIT;
		reg_progress_format(p, elapsed(v), &b);
		fprintf(stderr, "\r\033[K%s template: %s", v->verb, b.buf);
		v->drawn = true;
		kiln_buf_free(&b);
	}
}

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

static int done(struct view *v, const char *ref, const struct reg_tmpl_stats *st, const char *local)
{
	char moved[32], total[32];
	kiln_error *err = NULL;

	if (v->drawn)
		fputc('\n', stderr);
	human(moved, sizeof(moved), (double)st->bytes_moved);
	human(total, sizeof(total), (double)st->bytes_total);
	fprintf(stderr, "%s template %s: %s %s of %s (%.1f%%), %zu of %zu blobs, %.1fs\n", v->verb, local ? local : ref,
		strcmp(v->verb, "push") == 0 ? "sent" : "received", moved, total,
		st->bytes_total ? 100.0 * (double)st->bytes_moved / (double)st->bytes_total : 0.0, st->blobs_moved,
		st->blobs_total, st->seconds);
	if (v->json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "event", "done", "kind", "template",
				      "digest", st->manifest_digest, "ref", ref, "bytes_total", (json_int_t)st->bytes_total,
				      "bytes_moved", (json_int_t)st->bytes_moved, "blobs_total", (json_int_t)st->blobs_total,
				      "blobs_moved", (json_int_t)st->blobs_moved, "seconds", elapsed(v));
		if (local) {
			json_object_set_new(j, "name", json_string(local));
			json_object_set_new(j, "template", json_string(st->template_digest));
		}
		print_json(j);
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

int cli_tmpl_push(const char *ref, const char *dest, const struct cli_xfer_flags *f)
{
	struct reg_imgref r = { 0 };
	struct reg_tmpl_stats st = { 0 };
	struct view v = { .json = f->json, .tty = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO), .verb = "push" };
	struct reg_tmpl_xfer_opts o = { .parallel = f->parallel, .progress = on_progress, .ud = &v };
	reg_client *c = NULL;
	kiln_error *err = NULL;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &v.t0);
	if (reg_imgref_parse(dest, &r, &err) < 0 || (c = reg_client_new(r.host, NULL, &err)) == NULL ||
	    reg_tmpl_push(c, ref, r.repo, reg_imgref_reference(&r), &o, &st, &err) < 0) {
		if (v.drawn)
			fputc('\n', stderr);
		rc = cli_fail(err);
	} else {
		rc = done(&v, dest, &st, NULL);
	}
	reg_client_free(c);
	reg_imgref_free(&r);
	return rc;
}

int cli_tmpl_pull(const char *src, const struct cli_xfer_flags *f)
{
	struct reg_imgref r = { 0 };
	struct reg_doc m = { 0 };
	struct reg_tmpl_stats st = { 0 };
	struct view v = { .json = f->json, .tty = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO), .verb = "pull" };
	struct reg_tmpl_xfer_opts o = { .parallel = f->parallel, .progress = on_progress, .ud = &v };
	reg_client *c = NULL;
	kiln_error *err = NULL;
	char *local = NULL;
	int rc = -1;

	clock_gettime(CLOCK_MONOTONIC, &v.t0);
	if (reg_imgref_parse(src, &r, &err) < 0 || (c = reg_client_new(r.host, NULL, &err)) == NULL ||
	    reg_manifest_get(c, r.repo, reg_imgref_reference(&r), NULL, &m, &err) < 0) {
		/* Not ours to report: the image path says it again, or succeeds. */
		kiln_error_free(err);
		goto out;
	}
	if (!reg_tmpl_is_artifact(m.data, m.len))
		goto out;
	local = f->name ? kiln_xstrdup(f->name) : kiln_xasprintf("%s:%s", r.repo, r.tag ? r.tag : "latest");
	if (reg_tmpl_pull(c, r.repo, &m, local, &o, &st, &err) < 0) {
		if (v.drawn)
			fputc('\n', stderr);
		rc = cli_fail(err);
		goto out;
	}
	rc = done(&v, src, &st, local);
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
