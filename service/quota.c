/* quota.c — the team quotas the build service enforces (registry/quota.c
 * keeps the values): concurrent builds, applied where a worker claims the
 * next build (the others wait queued), and build minutes per UTC day,
 * applied to a submit (a build running when the day's minutes run out ends
 * normally).  Counted from the queue, so every host of a shared one agrees. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "service/internal.h"

#define NO_LIMIT ((int64_t)1 << 40)

static int64_t value_or(const struct reg_quota *q, enum reg_quota_key k, int64_t dflt)
{
	if (q->src[k] == REG_QUOTA_UNSET)
		return dflt;
	return q->v[k] == REG_QUOTA_NONE ? NO_LIMIT : q->v[k];
}

int svc_quota_builds(svc *s, json_t **teams, int64_t *dflt, kiln_error **err)
{
	kiln_strv v = KILN_STRV_INIT;
	struct reg_quota q;

	if (reg_server_quota(s->srv, "*", &q, err) < 0)
		return -1;
	*dflt = value_or(&q, REG_QUOTA_BUILDS, s->cfg.team_builds);
	*teams = json_object();
	if (reg_server_quota_teams(s->srv, REG_QUOTA_BUILDS, &v, err) < 0)
		goto fail;
	for (size_t i = 0; i < v.n; i++) {
		if (reg_server_quota(s->srv, v.v[i], &q, err) < 0)
			goto fail;
		json_object_set_new(*teams, v.v[i], json_integer(value_or(&q, REG_QUOTA_BUILDS, *dflt)));
	}
	kiln_strv_free(&v);
	return 0;
fail:
	kiln_strv_free(&v);
	json_decref(*teams);
	*teams = NULL;
	return -1;
}

int svc_quota_minutes_today(svc *s, const char *team, int64_t now, int64_t *seconds, kiln_error **err)
{
	char day[24], at[24];
	const char *p[] = { team, day, at };
	struct svc_rows r;

	svc_i64(day, now - now % 86400);
	svc_i64(at, now);
	/* the part of each build inside today, a running one up to now */
	if (svc_db_q(s->db, &r,
		     "SELECT coalesce(sum((CASE WHEN ended > 0 THEN ended ELSE CAST($3 AS BIGINT) END) -"
		     " (CASE WHEN started > CAST($2 AS BIGINT) THEN started ELSE CAST($2 AS BIGINT) END)), 0)"
		     " FROM svc_builds WHERE team = $1 AND started > 0 AND"
		     " (ended > CAST($2 AS BIGINT) OR (ended = 0 AND state = 'building'))",
		     p, 3, err) < 0)
		return -1;
	*seconds = r.n ? svc_row_int(&r, 0, 0) : 0;
	svc_rows_free(&r);
	return 0;
}

int svc_quota_check_minutes(svc *s, const char *team, kiln_error **err)
{
	struct reg_quota q;
	int64_t used, now = svc_now(), left;

	if (reg_server_quota(s->srv, team, &q, err) < 0)
		return -1;
	if (q.v[REG_QUOTA_BUILD_MINUTES] == REG_QUOTA_NONE)
		return 0;
	if (svc_quota_minutes_today(s, team, now, &used, err) < 0)
		return -1;
	if (used < q.v[REG_QUOTA_BUILD_MINUTES] * 60)
		return 0;
	left = 86400 - now % 86400;
	return kiln_err(err, KILN_E_QUOTA,
			"quota exceeded: team '%s' used %" PRId64 " of its %" PRId64 " build minutes today (UTC); nothing"
			" was queued; the count starts again at 00:00 UTC, in %" PRId64 " h %" PRId64 " min",
			team, used / 60, q.v[REG_QUOTA_BUILD_MINUTES], left / 3600, left % 3600 / 60);
}

/* GET /kiln/v1/usage's build quotas of a team (reg_observer.usage): its
 * builds running now on every host of the queue, as the claim counts them,
 * against `builds` (the service's team_builds when unset), and its minutes
 * of building today against `build_minutes`. */
int svc_quota_usage(void *ud, const char *team, json_t *quotas, kiln_error **err)
{
	svc *s = ud;
	struct reg_quota q;
	struct svc_rows r;
	const char *p[] = { team };
	int64_t running, seconds, builds, minutes;

	if (reg_server_quota(s->srv, team, &q, err) < 0 ||
	    svc_db_q(s->db, &r, "SELECT count(*) FROM svc_builds WHERE team = $1 AND state = 'building'", p, 1, err) < 0)
		return -1;
	running = r.n ? svc_row_int(&r, 0, 0) : 0;
	svc_rows_free(&r);
	if (svc_quota_minutes_today(s, team, svc_now(), &seconds, err) < 0)
		return -1;
	builds = value_or(&q, REG_QUOTA_BUILDS, s->cfg.team_builds);
	minutes = q.src[REG_QUOTA_BUILD_MINUTES] == REG_QUOTA_UNSET ? REG_QUOTA_NONE : q.v[REG_QUOTA_BUILD_MINUTES];
	reg_usage_set(quotas, "builds", running, builds >= NO_LIMIT ? -1 : builds);
	reg_usage_set(quotas, "build_minutes", seconds / 60, minutes);
	json_object_set_new(json_object_get(quotas, "build_minutes"), "used_seconds", json_integer(seconds));
	return 0;
}
