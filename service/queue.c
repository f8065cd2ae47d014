/* queue.c — builds as rows of svc_builds: submit, status, list, cancel, the
 * log with its cursor (svc_logs rows, so every host sharing the database
 * serves any build's log), and what workers do: claim fairly between teams
 * within the per-host and per-team limits, heartbeat, record progress and
 * the end.  A restart fails the builds its host had running. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "service/internal.h"

#define COLS "id, team, name, state, step, total, instruction, reason, location, image, image_digest," \
	     " template_ref, template_digest, host, created, started, ended"

static enum svc_state state_of(const char *s)
{
	for (int i = 0; i <= SVC_CANCELLED; i++)
		if (s && strcmp(s, svc_state_name((enum svc_state)i)) == 0)
			return (enum svc_state)i;
	return SVC_FAILED;
}

static char *dup_or_null(const char *s)
{
	return s ? kiln_xstrdup(s) : NULL;
}

static void status_from_row(const struct svc_rows *r, size_t i, struct svc_status *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", svc_row(r, i, 0));
	st->team = dup_or_null(svc_row(r, i, 1));
	st->name = dup_or_null(svc_row(r, i, 2));
	st->state = state_of(svc_row(r, i, 3));
	st->step = (int)svc_row_int(r, i, 4);
	st->total = (int)svc_row_int(r, i, 5);
	st->instruction = dup_or_null(svc_row(r, i, 6));
	st->reason = dup_or_null(svc_row(r, i, 7));
	st->location = dup_or_null(svc_row(r, i, 8));
	st->image = dup_or_null(svc_row(r, i, 9));
	st->image_digest = dup_or_null(svc_row(r, i, 10));
	st->template_ref = dup_or_null(svc_row(r, i, 11));
	st->template_digest = dup_or_null(svc_row(r, i, 12));
	st->host = dup_or_null(svc_row(r, i, 13));
	st->created = svc_row_int(r, i, 14);
	st->started = svc_row_int(r, i, 15);
	st->ended = svc_row_int(r, i, 16);
}

void svc_status_free(struct svc_status *st)
{
	if (st == NULL)
		return;
	free(st->team);
	free(st->name);
	free(st->instruction);
	free(st->reason);
	free(st->location);
	free(st->image);
	free(st->image_digest);
	free(st->template_ref);
	free(st->template_digest);
	free(st->host);
	memset(st, 0, sizeof(*st));
}

void svc_list_free(struct svc_status *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		svc_status_free(&v[i]);
	free(v);
}

int svc_q_by_key(svc *s, const char *team, const char *key, char id[SVC_ID_MAX], kiln_error **err)
{
	struct svc_rows r;
	const char *p[] = { team, key };
	int found;

	if (svc_db_q(s->db, &r, "SELECT id FROM svc_builds WHERE team = $1 AND client_key = $2", p, 2, err) < 0)
		return -1;
	found = r.n > 0;
	if (found)
		snprintf(id, SVC_ID_MAX, "%s", svc_row(&r, 0, 0));
	svc_rows_free(&r);
	return found;
}

int svc_q_insert(svc *s, const char *id, const char *team, const char *name, const char *request,
		 int64_t time_limit, const char *pin, const char *key, kiln_error **err)
{
	char now[24], tl[24], ms[24];
	const char *p[] = { id, team, name, request, now, tl, ms, pin, key };

	svc_i64(now, svc_now());
	svc_i64(tl, time_limit);
	svc_i64(ms, svc_now_ms());
	return svc_db_q(s->db, NULL,
			"INSERT INTO svc_builds(id, team, name, state, request, created, time_limit, qms, pin, client_key)"
			" VALUES($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9)", p, 9, err) < 0 ? -1 : 0;
}

void svc_new_id(char id[SVC_ID_MAX])
{
	unsigned char r[16];
	static const char hx[] = "0123456789abcdef";

	if (getrandom(r, sizeof(r), 0) != sizeof(r))
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (unsigned char)(rand() ^ getpid());
	memcpy(id, "b-", 2);
	for (size_t i = 0; i < sizeof(r); i++) {
		id[2 + 2 * i] = hx[r[i] >> 4];
		id[3 + 2 * i] = hx[r[i] & 15];
	}
	id[34] = '\0';
}

int svc_status(svc *s, const char *team, const char *id, struct svc_status *out, kiln_error **err)
{
	struct svc_rows r;
	const char *p[] = { id, team };
	int n = svc_db_q(s->db, &r, "SELECT " COLS " FROM svc_builds WHERE id = $1 AND team = $2", p, 2, err);

	if (n < 0)
		return -1;
	if (r.n == 0) {
		svc_rows_free(&r);
		return kiln_err(err, KILN_E_NOTFOUND, "no build %s", id);
	}
	status_from_row(&r, 0, out);
	svc_rows_free(&r);
	return 0;
}

int svc_list(svc *s, const char *team, const char *name, size_t max, struct svc_status **out, size_t *n,
	     kiln_error **err)
{
	struct svc_rows r;
	char lim[24];
	const char *p[] = { team, lim, name };

	svc_i64(lim, max ? (int64_t)max : 100);
	if (svc_db_q(s->db, &r,
		     name ? "SELECT " COLS " FROM svc_builds WHERE team = $1 AND name = $3 ORDER BY qms DESC, id LIMIT $2"
			  : "SELECT " COLS " FROM svc_builds WHERE team = $1 ORDER BY qms DESC, id LIMIT $2",
		     p, name ? 3 : 2, err) < 0)
		return -1;
	*n = r.n;
	*out = kiln_xcalloc(r.n + 1, sizeof(**out));
	for (size_t i = 0; i < r.n; i++)
		status_from_row(&r, i, &(*out)[i]);
	svc_rows_free(&r);
	return 0;
}

int svc_cancel(svc *s, const char *team, const char *id, kiln_error **err)
{
	struct svc_status st;
	char now[24];
	const char *p[] = { id, team, now };
	int n;

	svc_i64(now, svc_now());
	n = svc_db_q(s->db, NULL,
		     "UPDATE svc_builds SET state = 'cancelled', reason = 'cancelled before it started', ended = $3"
		     " WHERE id = $1 AND team = $2 AND state = 'queued'", p, 3, err);
	if (n < 0)
		return -1;
	if (n > 0) {
		svc_secrets_free(svc_secrets_claim(s, id));
		svc_log_append(s, id, "{\"event\":\"error\",\"message\":\"cancelled before it started\"}", NULL);
		return 0;
	}
	n = svc_db_q(s->db, NULL, "UPDATE svc_builds SET cancel = 1 WHERE id = $1 AND team = $2 AND state = 'building'",
		     p, 2, err);
	if (n < 0)
		return -1;
	if (n > 0)
		return 0;
	if (svc_status(s, team, id, &st, err) < 0)
		return -1;
	kiln_err(err, KILN_E_EXISTS, "build %s is already %s", id, svc_state_name(st.state));
	svc_status_free(&st);
	return -1;
}

/* Lines are numbered from 0 per build; nlog counts them (one writer: the
 * worker).  All the lines of one read of the build's output go in one
 * transaction, with the step they reached, and that commit does not wait
 * for the disk (svc_db_begin_relaxed): a cached build prints a dozen lines
 * in a few milliseconds, and an fsync each was most of its time here. */
int svc_log_append_lines(svc *s, const char *id, const char *const *lines, size_t nl, const struct svc_progress *pr,
			 kiln_error **err)
{
	struct svc_rows r;
	kiln_error *e = NULL;
	char n[24], a[24], b[24];
	const char *p[] = { id, n, NULL };
	int ret = -1;

	if (svc_db_begin_relaxed(s->db, err ? err : &e) < 0)
		goto out;
	if (svc_db_q(s->db, &r, "SELECT nlog FROM svc_builds WHERE id = $1", p, 1, err ? err : &e) < 0)
		goto fail;
	int64_t next = svc_row_int(&r, 0, 0);
	svc_rows_free(&r);
	for (size_t i = 0; i < nl; i++) {
		svc_i64(n, next + (int64_t)i);
		p[2] = lines[i];
		if (svc_db_q(s->db, NULL, "INSERT INTO svc_logs(build, n, line) VALUES($1, $2, $3)", p, 3, err ? err : &e) < 0)
			goto fail;
	}
	svc_i64(n, (int64_t)nl);
	if (nl && svc_db_q(s->db, NULL, "UPDATE svc_builds SET nlog = nlog + $2 WHERE id = $1", p, 2, err ? err : &e) < 0)
		goto fail;
	if (pr) {
		const char *pp[] = { id, a, b, pr->instruction };
		svc_i64(a, pr->step);
		svc_i64(b, pr->total);
		if (svc_db_q(s->db, NULL, "UPDATE svc_builds SET step = $2, total = $3, instruction = $4 WHERE id = $1",
			     pp, 4, err ? err : &e) < 0)
			goto fail;
	}
	ret = svc_db_commit(s->db, err ? err : &e);
	if (ret == 0)
		svc_logged(s);
	goto out;
fail:
	svc_db_rollback(s->db);
out:
	if (e) {
		kiln_warn("build %s: log: %s", id, kiln_error_message(e));
		kiln_error_free(e);
	}
	return ret;
}

int svc_log_append(svc *s, const char *id, const char *line, kiln_error **err)
{
	return svc_log_append_lines(s, id, &line, 1, NULL, err);
}

/* Wakes the log streams waiting in svc_logs (this host's writers; another
 * host's lines are seen at the next poll). */
void svc_logged(svc *s)
{
	pthread_mutex_lock(&s->lock);
	s->log_seq++;
	pthread_cond_broadcast(&s->logged);
	pthread_mutex_unlock(&s->lock);
}

int svc_logs(svc *s, const char *team, const char *id, int64_t cursor, int wait_ms, kiln_strv *lines,
	     int64_t *next, bool *ended, kiln_error **err)
{
	char cur[24];
	const char *p[] = { id, team }, *pc[] = { id, cur };
	int64_t waited = 0;

	*ended = false;
	*next = cursor < 0 ? 0 : cursor;
	for (;;) {
		struct svc_rows st, r;
		enum svc_state state;

		pthread_mutex_lock(&s->lock);
		uint64_t seq = s->log_seq;
		pthread_mutex_unlock(&s->lock);
		svc_i64(cur, *next);
		if (svc_db_q(s->db, &st, "SELECT state, nlog FROM svc_builds WHERE id = $1 AND team = $2", p, 2, err) < 0)
			return -1;
		if (st.n == 0) {
			svc_rows_free(&st);
			return kiln_err(err, KILN_E_NOTFOUND, "no build %s", id);
		}
		state = state_of(svc_row(&st, 0, 0));
		svc_rows_free(&st);
		if (svc_db_q(s->db, &r, "SELECT line FROM svc_logs WHERE build = $1 AND n >= $2 ORDER BY n LIMIT 1000",
			     pc, 2, err) < 0)
			return -1;
		for (size_t i = 0; i < r.n; i++)
			kiln_strv_push(lines, svc_row(&r, i, 0));
		*next += (int64_t)r.n;
		svc_rows_free(&r);
		/* over, and this read saw every line written before the end */
		if (state != SVC_QUEUED && state != SVC_BUILDING && r.n < 1000) {
			svc_i64(cur, *next);
			if (svc_db_q(s->db, &r, "SELECT count(*) FROM svc_logs WHERE build = $1 AND n >= $2", pc, 2, err) < 0)
				return -1;
			*ended = svc_row_int(&r, 0, 0) == 0;
			svc_rows_free(&r);
		}
		if (lines->n > 0 || *ended || waited >= wait_ms)
			return 0;
		/* woken by this host's next line or state change; polled every
		 * 100 ms for what another host sharing the queue writes */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		int64_t t0 = (int64_t)kiln_now_ms();
		pthread_mutex_lock(&s->lock);
		while (s->log_seq == seq && !s->stopping &&
		       pthread_cond_timedwait(&s->logged, &s->lock, &ts) == 0)
			;
		pthread_mutex_unlock(&s->lock);
		waited += (int64_t)kiln_now_ms() - t0;
	}
}

/* The next build for this host, fairly: teams under their limit, the team
 * with the fewest running first, then the oldest queued.  PostgreSQL: the
 * candidate row is locked FOR UPDATE SKIP LOCKED (two hosts never take the
 * same one), and the team's count is taken under a transaction-scoped
 * advisory lock on the team so two hosts cannot both exceed its limit. */
int svc_q_claim(svc *s, char id[SVC_ID_MAX], kiln_error **err)
{
	struct svc_rows r = { 0 };
	char lim[24], now[24], *per_team;
	const char *p[] = { lim, now, s->host_id, NULL };
	int pg = svc_db_is_pg(s->db), ret = 0;
	json_t *teams;
	int64_t dflt;

	/* the teams' own running limits (quotas) as {"team": n}, the rest dflt */
	if (svc_quota_builds(s, &teams, &dflt, err) < 0)
		return -1;
	per_team = json_dumps(teams, JSON_COMPACT);
	svc_i64(lim, dflt);
	svc_i64(now, svc_now());
	/* sqlite: a claim need not wait for the disk.  Lost to a power loss, the
	 * build is queued again and runs again (nothing of it was tagged: the
	 * push and the build's end are ordinary commits, which make this one
	 * durable before them).  PostgreSQL: a lost claim could let another
	 * host take a build that is running, so it stays synchronous. */
	if ((pg ? svc_db_begin(s->db, err) : svc_db_begin_relaxed(s->db, err)) < 0) {
		ret = -1;
		goto out;
	}
	const char *ps[] = { lim, s->host_id, per_team };
	/* sqlite: parameters are text, and a count is less than any text: cast */
	/* a pinned build (secrets in one host's memory) is that host's only */
	const char *sql =
		pg ? "SELECT b.id, b.team FROM svc_builds b WHERE b.state = 'queued' AND (b.pin IS NULL OR b.pin = $2) AND"
		     " (SELECT count(*) FROM svc_builds x WHERE x.team = b.team AND x.state = 'building') <"
		     " coalesce(($3::jsonb ->> b.team)::bigint, $1::bigint)"
		     " ORDER BY (SELECT count(*) FROM svc_builds x WHERE x.team = b.team AND x.state = 'building'),"
		     " b.qms, b.id LIMIT 1 FOR UPDATE SKIP LOCKED"
		   : "SELECT b.id, b.team FROM svc_builds b WHERE b.state = 'queued' AND (b.pin IS NULL OR b.pin = $2) AND"
		     " (SELECT count(*) FROM svc_builds x WHERE x.team = b.team AND x.state = 'building') <"
		     " coalesce((SELECT value FROM json_each($3) WHERE key = b.team), CAST($1 AS INTEGER))"
		     " ORDER BY (SELECT count(*) FROM svc_builds x WHERE x.team = b.team AND x.state = 'building'),"
		     " b.qms, b.id LIMIT 1";
	if (svc_db_q(s->db, &r, sql, ps, 3, err) < 0)
		goto fail;
	if (r.n == 0)
		goto done;
	p[3] = svc_row(&r, 0, 0);
	if (pg) {
		struct svc_rows c;
		const char *tp[] = { svc_row(&r, 0, 1), lim };
		json_t *own = json_object_get(teams, tp[0]);
		if (svc_db_q(s->db, NULL, "SELECT pg_advisory_xact_lock(hashtext($1))", tp, 1, err) < 0 ||
		    svc_db_q(s->db, &c, "SELECT count(*) FROM svc_builds WHERE team = $1 AND state = 'building'", tp, 1,
			     err) < 0)
			goto fail;
		int64_t running = svc_row_int(&c, 0, 0);
		svc_rows_free(&c);
		if (running >= (own ? json_integer_value(own) : dflt))
			goto done;
	}
	const char *up[] = { p[3], now, s->host_id };
	if (svc_db_q(s->db, NULL,
		     "UPDATE svc_builds SET state = 'building', host = $3, started = $2, heartbeat = $2 WHERE id = $1",
		     up, 3, err) < 0)
		goto fail;
	snprintf(id, SVC_ID_MAX, "%s", p[3]);
	ret = 1;
done:
	svc_rows_free(&r);
	if (svc_db_commit(s->db, err) < 0)
		ret = -1;
	goto out;
fail:
	svc_rows_free(&r);
	svc_db_rollback(s->db);
	ret = -1;
out:
	free(per_team);
	json_decref(teams);
	return ret;
}

int svc_q_job(svc *s, const char *id, char **team, char **request, int64_t *time_limit, kiln_error **err)
{
	struct svc_rows r;
	const char *p[] = { id };

	if (svc_db_q(s->db, &r, "SELECT team, request, time_limit FROM svc_builds WHERE id = $1", p, 1, err) < 0)
		return -1;
	if (r.n == 0) {
		svc_rows_free(&r);
		return kiln_err(err, KILN_E_NOTFOUND, "no build %s", id);
	}
	*team = kiln_xstrdup(svc_row(&r, 0, 0));
	*request = kiln_xstrdup(svc_row(&r, 0, 1));
	*time_limit = svc_row_int(&r, 0, 2);
	svc_rows_free(&r);
	return 0;
}

/* Heartbeat; returns 1 when a cancel was asked for. */
int svc_q_heartbeat(svc *s, const char *id, kiln_error **err)
{
	struct svc_rows r;
	char now[24];
	const char *p[] = { id, now };

	svc_i64(now, svc_now());
	if (svc_db_q(s->db, NULL, "UPDATE svc_builds SET heartbeat = $2 WHERE id = $1", p, 2, err) < 0 ||
	    svc_db_q(s->db, &r, "SELECT cancel FROM svc_builds WHERE id = $1", p, 1, err) < 0)
		return -1;
	int c = (int)svc_row_int(&r, 0, 0);
	svc_rows_free(&r);
	return c != 0;
}

int svc_q_finish(svc *s, const char *id, enum svc_state state, const char *reason, const char *location,
		 const struct svc_result *res, kiln_error **err)
{
	char now[24];
	const char *p[] = { id, svc_state_name(state), reason, location, now,
			    res ? res->image : NULL, res ? res->image_digest : NULL,
			    res ? res->template_ref : NULL, res ? res->template_digest : NULL, res ? res->replay : NULL };

	svc_i64(now, svc_now());
	int ret = svc_db_q(s->db, NULL,
			   "UPDATE svc_builds SET state = $2, reason = $3, location = $4, ended = $5, image = $6,"
			   " image_digest = $7, template_ref = $8, template_digest = $9, replay = $10"
			   " WHERE id = $1 AND state = 'building'",
			   p, 10, err) < 0 ? -1 : 0;
	svc_logged(s); /* a stream waiting for the end */
	return ret;
}

/* At start: this host's running builds were cut by the restart; another
 * host's whose heartbeat stopped more than stale_s ago likewise. */
int svc_q_recover(svc *s, int64_t stale_s, kiln_error **err)
{
	struct svc_rows r;
	char now[24], old[24];
	const char *p[] = { s->host_id, old };

	svc_i64(now, svc_now());
	svc_i64(old, svc_now() - stale_s);
	if (svc_db_q(s->db, &r,
		     "SELECT id, host FROM svc_builds WHERE state = 'building' AND (host = $1 OR heartbeat < $2)", p, 2,
		     err) < 0)
		return -1;
	for (size_t i = 0; i < r.n; i++) {
		const char *id = svc_row(&r, i, 0), *host = svc_row(&r, i, 1);
		char *why = host && strcmp(host, s->host_id) == 0
				    ? kiln_xstrdup("the server restarted while the build was running; nothing was published")
				    : kiln_xasprintf("host %s stopped while the build was running; nothing was published",
						     host ? host : "?");
		char *line = NULL;
		json_t *j = json_pack("{s:s,s:s}", "event", "error", "message", why);
		line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
		json_decref(j);
		svc_log_append(s, id, line, NULL);
		if (svc_q_finish(s, id, SVC_FAILED, why, NULL, NULL, err) < 0) {
			free(why);
			free(line);
			svc_rows_free(&r);
			return -1;
		}
		kiln_warn("build %s: %s", id, why);
		free(line);
		free(why);
	}
	svc_rows_free(&r);
	/* queued here with secrets: they were in the memory of the process that
	 * stopped (sqlite: every pinned one, one server uses its database) */
	static const char why[] = "the server restarted before the build started; its secrets were kept in "
				  "memory only: submit it again";
	const char *pq[] = { s->host_id };
	if (svc_db_q(s->db, &r,
		     svc_db_is_pg(s->db) ? "SELECT id FROM svc_builds WHERE state = 'queued' AND pin = $1"
					 : "SELECT id FROM svc_builds WHERE state = 'queued' AND pin IS NOT NULL",
		     pq, svc_db_is_pg(s->db) ? 1 : 0, err) < 0)
		return -1;
	for (size_t i = 0; i < r.n; i++) {
		const char *pi[] = { svc_row(&r, i, 0), why, now };
		svc_log_append(s, pi[0], "{\"event\":\"error\",\"message\":\"the server restarted before the build "
					 "started; its secrets were kept in memory only: submit it again\"}", NULL);
		if (svc_db_q(s->db, NULL, "UPDATE svc_builds SET state = 'failed', reason = $2, ended = $3"
				       " WHERE id = $1 AND state = 'queued'", pi, 3, err) < 0) {
			svc_rows_free(&r);
			return -1;
		}
		kiln_warn("build %s: %s", pi[0], why);
	}
	svc_rows_free(&r);
	svc_logged(s);
	return 0;
}
