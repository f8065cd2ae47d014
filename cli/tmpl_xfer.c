/* tmpl_xfer.c — the template path of `kiln push` / `kiln pull`: the registry
 * library moves the chunks (distrib/tmpl_xfer.c); this prints one summary
 * line on stderr with the bytes moved and, with --json, a final "done" event
 * carrying the byte counts (progress: cli/xfer.c, no event per chunk). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/store.h"
#include "cli/xfer.h"
#include "snapshots/snapshots.h"

void cli_prechunk_hook(void *ud, const char *rootfs)
{
	dist_prechunk **pc = ud;

	if (*pc == NULL)
		*pc = dist_prechunk_start(rootfs);
}

void cli_prechunk_end(dist_prechunk **pc, const char *template_digest)
{
	kiln_error *err = NULL;

	if (*pc == NULL)
		return;
	if (template_digest == NULL || !template_digest[0]) {
		dist_prechunk_abort(*pc);
	} else if (dist_prechunk_finish(*pc, template_digest, &err) < 0) {
		kiln_warn("%s (kiln push chunks it)", kiln_error_message(err));
		kiln_error_free(err);
	}
	*pc = NULL;
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

static int done(struct cli_xfer *x, bool push, const char *ref, const struct dist_tmpl_stats *st, const char *local)
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
	} else if (!x->quiet) {
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

/* The template's recorded provenance, attached to the pushed manifest. */
static int tmpl_provenance(const char *key, const char *ref, const char *dest, const char *digest, kiln_error **err)
{
	snap_template *t = snap_template_open(ref, err);
	int rc = t ? cli_provenance_pushed(key, snap_template_digest(t), dest, digest, err) : -1;

	snap_template_free(t);
	return rc;
}

int cli_tmpl_push(const char *ref, const char *dest, struct cli_xfer *x)
{
	struct oci_imgref r = { 0 };
	struct dist_tmpl_stats st = { 0 };
	struct dist_tmpl_xfer_opts o = { .parallel = x->parallel, .progress = cli_xfer_progress, .ud = x };
	rc_client *c = NULL;
	kiln_error *err = NULL;
	int rc;

	cli_xfer_start(x, "push template", false);
	if (oci_imgref_parse(dest, &r, &err) < 0 || (c = rc_client_new(r.host, NULL, &err)) == NULL ||
	    cli_sign_check_key(x->sign, &err) < 0 ||
	    dist_tmpl_push(c, ref, r.repo, oci_imgref_reference(&r), &o, &st, &err) < 0 ||
	    (x->sign && cli_sign_pushed(x->sign, dest, st.manifest_digest, &err) < 0) ||
	    (x->sign && tmpl_provenance(x->sign, ref, dest, st.manifest_digest, &err) < 0)) {
		cli_xfer_end_line(x);
		rc = cli_fail(err);
	} else {
		rc = done(x, true, dest, &st, NULL);
	}
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}

/* Pull src if it is a template artifact: 1 pulled (named x->name or src's
 * canonical local name, *local set), 0 a plain image (nothing done), -1 its
 * manifest could not be fetched, -2 the template pull failed (*err both).
 * With x->quiet the summary goes to stderr only. */
static int tmpl_pull(const char *src, struct cli_xfer *x, char **local, kiln_error **err)
{
	struct oci_imgref r = { 0 };
	struct rc_doc m = { 0 };
	struct dist_tmpl_stats st = { 0 };
	struct dist_tmpl_xfer_opts o = { .parallel = x->parallel, .progress = cli_xfer_progress, .ud = x };
	rc_client *c = NULL;
	int rc = -1;

	*local = NULL;
	cli_xfer_start(x, "pull template", false);
	if (oci_imgref_parse(src, &r, err) < 0 || (c = rc_client_new(r.host, NULL, err)) == NULL ||
	    rc_manifest_get(c, r.repo, oci_imgref_reference(&r), NULL, &m, err) < 0)
		goto out;
	/* before any chunk (or layer) of it is fetched */
	if (cli_verify_pulled(c, &r, &m, x->policy, err) < 0) {
		cli_xfer_end_line(x);
		rc = -2;
		goto out;
	}
	if (!oci_tmpl_is_artifact(m.data, m.len)) {
		memcpy(x->pin, m.digest, KILN_DIGEST_MAX);
		rc = 0;
		goto out;
	}
	*local = x->name ? kiln_xstrdup(x->name) : kiln_ref_normalize(src, err);
	if (*local == NULL ||
	    (x->lazy ? dist_tmpl_pull_lazy(c, r.host, r.repo, &m, *local, &o, &st, err)
		     : dist_tmpl_pull(c, r.repo, &m, *local, &o, &st, err)) < 0) {
		cli_xfer_end_line(x);
		rc = -2;
		goto out;
	}
	if (x->lazy) {
		/* start the file server now: its prefetch fills in the rest */
		kiln_error *e = NULL;
		char *dir = dist_chunkfs_files(st.template_digest, &e);
		if (dir == NULL)
			fprintf(stderr, "kiln pull: warning: %s\n", kiln_error_message(e));
		kiln_error_free(e);
		free(dir);
	}
	rc = done(x, false, src, &st, *local) == KILN_EXIT_OK ? 1 : -2;
out:
	if (rc < 0) {
		free(*local);
		*local = NULL;
	}
	rc_doc_free(&m);
	rc_client_free(c);
	oci_imgref_free(&r);
	return rc;
}

/* A template made on another kind of host is refused at restore: say so now. */
static void warn_restorable(const char *local)
{
	kiln_error *err = NULL;
	snap_template *t = snap_template_open(local, &err);

	if (t && snap_template_check(t, false, &err) < 0)
		fprintf(stderr, "kiln pull: warning: this host cannot restore %s: %s\n", local, kiln_error_message(err));
	kiln_error_free(err);
	snap_template_free(t);
}

int cli_tmpl_pull(const char *src, struct cli_xfer *x)
{
	kiln_error *err = NULL;
	char *local = NULL;
	int rc = tmpl_pull(src, x, &local, &err);

	if (rc == -2)
		return err ? cli_fail(err) : KILN_EXIT_FAIL;
	if (rc == -1) {
		/* Not ours to report: the image path says it again, or succeeds. */
		kiln_error_free(err);
		return -1;
	}
	if (rc == 0)
		return -1;
	warn_restorable(local);
	free(local);
	return KILN_EXIT_OK;
}

bool cli_is_image(const char *ref)
{
	kiln_error *e = NULL;
	build_store *s = NULL;
	json_t *images = NULL;
	char *norm = kiln_ref_normalize(ref, &e);
	bool yes = false;

	if (norm && build_store_open(NULL, &s, &e) == 0 && (images = build_store_images(s, &e)) != NULL)
		yes = json_object_get(images, norm) != NULL;
	json_decref(images);
	build_store_close(s);
	kiln_error_free(e);
	free(norm);
	return yes;
}

int cli_tmpl_need(const char *ref, kiln_error **err)
{
	kiln_error *e = NULL;
	snap_template *t = snap_template_open(ref, &e);
	struct cli_xfer x;
	char *local = NULL;
	int rc;

	if (t) {
		rc = cli_verify_local(ref, snap_template_digest(t), err);
		snap_template_free(t);
		return rc;
	}
	if (e->kind != KILN_E_NOTFOUND || !kiln_ref_has_host(ref)) {
		if (e->kind == KILN_E_NOTFOUND && cli_is_image(ref)) {
			kiln_error_free(e);
			return kiln_err(err, KILN_E_NOTFOUND,
					"%s is an image, not a template; build it with --template, or `kiln snapshot %s`",
					ref, ref);
		}
		if (e->kind == KILN_E_NOTFOUND) {
			kiln_err(err, KILN_E_NOTFOUND,
				 "%s here (kiln snapshot ls lists the templates; a reference naming a registry, "
				 "HOST[:PORT]/NAME:TAG, is pulled)", kiln_error_cause(e));
			kiln_error_free(e);
			return -1;
		}
		*err = e;
		return -1;
	}
	kiln_error_free(e);
	cli_xfer_init(&x, "pull template");
	x.quiet = true;
	x.lazy = cli_lazy_default();
	fprintf(stderr, "kiln: template %s is not on this host: pulling it\n", ref);
	rc = tmpl_pull(ref, &x, &local, err);
	if (rc < 0)
		return kiln_error_wrap(err, "template %s is not on this host, and pulling it failed", ref);
	if (rc == 0)
		return kiln_err(err, KILN_E_NOTFOUND,
				"%s is an image, not a template: it was pushed from an image (kiln build without "
				"--template); push a template instead (kiln build --template, or kiln snapshot NAME, "
				"then kiln push), or make one here: kiln pull %s && kiln snapshot %s",
				ref, ref, ref);
	warn_restorable(local);
	free(local);
	return 0;
}

bool cli_lazy_default(void)
{
	const char *e = getenv("KILN_LAZY");

	if (e && *e)
		return strcmp(e, "0") != 0;
	return true;
}
