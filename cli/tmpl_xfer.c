/* tmpl_xfer.c — the template path of `kiln push` / `kiln pull`: the registry
 * library moves the chunks; this prints progress on a terminal (bytes,
 * chunks, rate, ETA), one summary line on stderr, and with --json one object
 * on stdout for CI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/tmpl_xfer.h"
#include "snapshots/snapshots.h"

struct view {
	bool tty;
	const char *verb;
	double t0, last;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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

static void on_progress(void *ud, const struct reg_progress *p)
{
	struct view *v = ud;
	double t = now_s();
	char done[32], total[32], rate[32];

	if (!v->tty || (t - v->last < 0.1 && p->blobs_done < p->blobs_total))
		return;
	v->last = t;
	double el = t - v->t0, r = el > 0 ? (double)p->bytes_moved / el : 0;
	human(done, sizeof(done), (double)p->bytes_done);
	human(total, sizeof(total), (double)p->bytes_total);
	human(rate, sizeof(rate), r);
	double left = p->bytes_total > p->bytes_done ? (double)(p->bytes_total - p->bytes_done) : 0;
	fprintf(stderr, "\r\033[K%s %s / %s, %zu/%zu chunks (%zu present), %s/s", v->verb, done, total, p->blobs_done,
		p->blobs_total, p->blobs_skipped, rate);
	if (r > 0 && left > 0)
		fprintf(stderr, ", ETA %.0fs", left / r);
	fflush(stderr);
}

static void report(struct view *v, const char *what, const struct reg_tmpl_stats *st, const char *name,
		   const struct cli_xfer_flags *f)
{
	char moved[32], total[32];

	if (v->tty)
		fprintf(stderr, "\r\033[K");
	human(moved, sizeof(moved), (double)st->bytes_moved);
	human(total, sizeof(total), (double)st->bytes_total);
	fprintf(stderr, "%s %s: %s moved of %s (%.1f%%), %zu of %zu blobs, %.1fs\n", what, name, moved, total,
		st->bytes_total ? 100.0 * (double)st->bytes_moved / (double)st->bytes_total : 0.0, st->blobs_moved,
		st->blobs_total, st->seconds);
	if (f->json) {
		json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:f}", "kind", "template", "name", name,
				      "manifest", st->manifest_digest, "bytes_total", (json_int_t)st->bytes_total,
				      "bytes_moved", (json_int_t)st->bytes_moved, "blobs_total",
				      (json_int_t)st->blobs_total, "blobs_moved", (json_int_t)st->blobs_moved, "seconds",
				      st->seconds);
		if (st->template_digest[0])
			json_object_set_new(o, "template", json_string(st->template_digest));
		cli_print_json(o);
		json_decref(o);
	} else {
		printf("%s\n", st->template_digest[0] ? st->template_digest : st->manifest_digest);
	}
}

bool cli_is_template(const char *ref)
{
	kiln_error *e = NULL;
	snap_template *t = snap_template_open(ref, &e);

	kiln_error_free(e);
	snap_template_free(t);
	return t != NULL;
}

int cli_tmpl_push(const char *ref, const char *dest, const struct cli_xfer_flags *f)
{
	struct reg_imgref r = { 0 };
	struct reg_tmpl_stats st = { 0 };
	struct view v = { .tty = isatty(2), .verb = "push", .t0 = now_s() };
	struct reg_tmpl_xfer_opts o = { .parallel = f->parallel, .progress = on_progress, .ud = &v };
	reg_client *c = NULL;
	kiln_error *err = NULL;
	int rc = KILN_EXIT_FAIL;

	if (reg_imgref_parse(dest, &r, &err) < 0 || (c = reg_client_new(r.host, NULL, &err)) == NULL)
		goto out;
	if (reg_tmpl_push(c, ref, r.repo, reg_imgref_reference(&r), &o, &st, &err) < 0)
		goto out;
	char *to = reg_imgref_str(&r);
	report(&v, "pushed template", &st, to, f);
	free(to);
	rc = KILN_EXIT_OK;
out:
	if (err) {
		if (v.tty)
			fprintf(stderr, "\n");
		rc = cli_fail(err);
	}
	reg_client_free(c);
	reg_imgref_free(&r);
	return rc;
}

int cli_tmpl_pull(reg_client *c, const struct reg_imgref *r, const struct reg_doc *m, const char *name,
		  const struct cli_xfer_flags *f)
{
	struct reg_tmpl_stats st = { 0 };
	struct view v = { .tty = isatty(2), .verb = "pull", .t0 = now_s() };
	struct reg_tmpl_xfer_opts o = { .parallel = f->parallel, .progress = on_progress, .ud = &v };
	kiln_error *err = NULL;
	char *local = name ? kiln_xstrdup(name) : kiln_xasprintf("%s:%s", r->repo, r->tag ? r->tag : "latest");

	if (reg_tmpl_pull(c, r->repo, m, local, &o, &st, &err) < 0) {
		free(local);
		if (v.tty)
			fprintf(stderr, "\n");
		return cli_fail(err);
	}
	report(&v, "pulled template", &st, local, f);
	/* Usable here? A template made on another kind of host is refused at restore; say so now. */
	snap_template *t = snap_template_open(local, &err);
	if (t && snap_template_check(t, false, &err) < 0)
		fprintf(stderr, "kiln pull: warning: this host cannot restore it: %s\n", kiln_error_message(err));
	kiln_error_free(err);
	snap_template_free(t);
	free(local);
	return KILN_EXIT_OK;
}
