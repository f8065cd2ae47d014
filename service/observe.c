/* observe.c — what the build service adds to `kiln serve`'s /metrics and
 * /readyz: the queue per team as the database has it (so every host of a
 * shared PostgreSQL queue reports the same depth), and what this process's
 * workers ran (outcomes, durations, the step cache's hits). */
#include <stdlib.h>
#include <string.h>

#include "service/internal.h"

static const char *const outcomes[3] = { "done", "failed", "cancelled" };

static int outcome_index(enum svc_state st)
{
	return st == SVC_DONE ? 0 : st == SVC_CANCELLED ? 2 : 1;
}

void svc_metrics_build_ended(svc *s, enum svc_state st, double seconds)
{
	int i = outcome_index(st);

	__atomic_fetch_add(&s->metrics.ended[i], 1, __ATOMIC_RELAXED);
	reg_histogram_observe(&s->metrics.duration[i], seconds);
}

void svc_metrics_step(svc *s, bool cached)
{
	__atomic_fetch_add(&s->metrics.steps[cached ? 0 : 1], 1, __ATOMIC_RELAXED);
}

/* Builds queued or building per team, as one gauge family each. */
static void queue_families(svc *s, kiln_buf *out)
{
	static const char *const states[2] = { "queued", "building" };
	static const char *const names[2] = { "kiln_build_queue_depth", "kiln_builds_running" };
	static const char *const helps[2] = { "Builds waiting for a worker, per team (the whole queue, every host's).",
					      "Builds running, per team (on every host of the queue)." };
	struct svc_rows r;
	kiln_error *err = NULL;

	if (svc_db_q(s->db, &r,
		     "SELECT team, state, count(*) FROM svc_builds WHERE state IN ('queued', 'building')"
		     " GROUP BY team, state ORDER BY team",
		     NULL, 0, &err) < 0) {
		/* /readyz names the failure; the scrape keeps the rest */
		kiln_warn("metrics: the build queue: %s", kiln_error_message(err));
		kiln_error_free(err);
		return;
	}
	for (int k = 0; k < 2; k++) {
		reg_metric_head(out, names[k], "gauge", helps[k]);
		for (size_t i = 0; i < r.n; i++) {
			if (strcmp(svc_row(&r, i, 1) ? svc_row(&r, i, 1) : "", states[k]) != 0)
				continue;
			kiln_buf_addf(out, "%s{team=\"", names[k]);
			reg_metric_label(out, svc_row(&r, i, 0) ? svc_row(&r, i, 0) : "");
			kiln_buf_addf(out, "\"} %lld\n", (long long)svc_row_int(&r, i, 2));
		}
	}
	svc_rows_free(&r);
}

static void metrics(void *ud, kiln_buf *out)
{
	static const char *const cache[2] = { "hit", "miss" };
	svc *s = ud;

	queue_families(s, out);
	reg_metric_counters(out, "kiln_builds_ended_total",
			    "Builds this server's workers ran to an end, by outcome (done, failed, cancelled).", "outcome",
			    outcomes, s->metrics.ended, 3);
	reg_metric_histograms(out, "kiln_build_duration_seconds", "From a worker taking a build to its end, by outcome.",
			      "outcome", outcomes, s->metrics.duration, 3);
	reg_metric_counters(out, "kiln_build_steps_total",
			    "Build steps this server's workers ran, by whether the step cache had them (hit, miss).", "cache",
			    cache, s->metrics.steps, 2);
	reg_metric_head(out, "kiln_build_workers", "gauge", "Builds this server runs at once at most.");
	kiln_buf_addf(out, "kiln_build_workers %u\n", s->nworkers);
}

/* The queue answers (sqlite here, or the PostgreSQL every host shares). */
static int ready(void *ud, kiln_error **err)
{
	svc *s = ud;
	struct svc_rows r;

	if (svc_db_q(s->db, &r, "SELECT count(*) FROM svc_builds WHERE state = 'queued'", NULL, 0, err) < 0)
		return -1;
	svc_rows_free(&r);
	return 0;
}

void svc_observe(svc *s)
{
	s->observer = (struct reg_observer){ .name = "build queue", .ud = s, .metrics = metrics, .ready = ready,
					   .usage = svc_quota_usage };
}
