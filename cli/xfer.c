/* xfer.c — the progress view and flags `kiln push` and `kiln pull` share, for
 * plain images and templates alike: a redrawn line on a terminal (blobs,
 * bytes, rate, ETA), nothing when output is not a terminal, compact JSON
 * events with --json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli/xfer.h"

void cli_xfer_init(struct cli_xfer *x, const char *label)
{
	*x = (struct cli_xfer){ .label = label, .per_blob = true,
				.tty = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) };
}

int cli_xfer_limit_rate(const struct kiln_command *cmd, const struct cli_option *opt, const char *arg)
{
	struct cli_xfer *x = opt->value;
	kiln_error *err = NULL;

	if (kiln_parse_size(arg, &x->max_rate, &err) < 0 || x->max_rate == 0) {
		kiln_error_free(err);
		return cli_usage_error(cmd, "--limit-rate '%s': want bytes per second (e.g. 10M)", arg);
	}
	return KILN_EXIT_OK;
}

void cli_xfer_start(struct cli_xfer *x, const char *label, bool per_blob)
{
	x->label = label;
	x->per_blob = per_blob;
	x->t0_ms = kiln_now_ms();
}

double cli_xfer_elapsed(const struct cli_xfer *x)
{
	return (kiln_now_ms() - x->t0_ms) / 1e3;
}

void cli_xfer_event(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
	printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(j);
}

void cli_xfer_progress(void *ud, const struct rc_progress *p)
{
	struct cli_xfer *x = ud;

	if (p->digest && !x->per_blob && p->blobs_done < p->blobs_total)
		return; /* the periodic updates are enough */
	if (x->json) {
		json_t *j = rc_progress_json(p, cli_xfer_elapsed(x));
		json_object_set_new(j, "event", json_string(p->digest && x->per_blob ? "blob" : "progress"));
		cli_xfer_event(j);
	} else if (x->tty) {
		kiln_buf b = KILN_BUF_INIT;
		rc_progress_format(p, cli_xfer_elapsed(x), &b);
		fprintf(stderr, "\r\033[K%s: %s", x->label, b.buf);
		x->drawn = true;
		kiln_buf_free(&b);
	}
}

void cli_xfer_end_line(struct cli_xfer *x)
{
	if (x->drawn)
		fputc('\n', stderr);
	x->drawn = false;
}

int cli_xfer_done_image(struct cli_xfer *x, const char *digest, const char *ref)
{
	kiln_error *err = NULL;

	if (x->json)
		cli_xfer_event(json_pack("{s:s,s:s,s:s,s:f}", "event", "done", "digest", digest, "ref", ref, "seconds",
					 cli_xfer_elapsed(x)));
	else
		printf("%s\n", digest);
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		return cli_fail(err);
	}
	return KILN_EXIT_OK;
}
