/* quota.c — what each team may hold: stored bytes and repositories (checked
 * here, inside the write transactions that would add them), concurrent builds,
 * build minutes and sandboxes (read by service/ and runtime/ through
 * reg_server_quota).  Values come from the config file and from meta.db
 * (`kiln registry quota`); the database's win, a team's own over "*"'s. */
#include <stdlib.h>
#include <string.h>

#include "registry/internal.h"

/* min 1 where 0 would not mean "none allowed" but stall (a queue never
 * served) or read as the runtime's "no limit" */
static const struct {
	const char *key, *what;
	bool size; /* a byte count: "10G" accepted */
	int min;
} keys[REG_QUOTA_N] = {
	[REG_QUOTA_BYTES] = { "bytes", "stored bytes", true, 0 },
	[REG_QUOTA_REPOS] = { "repos", "repositories", false, 0 },
	[REG_QUOTA_BUILDS] = { "builds", "concurrent builds", false, 1 },
	[REG_QUOTA_BUILD_MINUTES] = { "build_minutes", "build minutes per day (UTC)", false, 0 },
	[REG_QUOTA_SANDBOXES] = { "sandboxes", "running sandboxes", false, 1 },
	[REG_QUOTA_SANDBOX_MEMORY] = { "sandbox_memory_mib", "memory of running sandboxes (MiB)", false, 1 },
	[REG_QUOTA_SANDBOX_VCPUS] = { "sandbox_vcpus", "vCPUs of running sandboxes", false, 1 },
};

const char *reg_quota_key_name(enum reg_quota_key k)
{
	return keys[k].key;
}

const char *reg_quota_key_what(enum reg_quota_key k)
{
	return keys[k].what;
}

int reg_quota_key_parse(const char *name, enum reg_quota_key *k, kiln_error **err)
{
	for (int i = 0; i < REG_QUOTA_N; i++)
		if (strcmp(name, keys[i].key) == 0) {
			*k = (enum reg_quota_key)i;
			return 0;
		}
	return kiln_err(err, KILN_E_USAGE,
			"unknown quota '%s' (bytes, repos, builds, build_minutes, sandboxes, sandbox_memory_mib, "
			"sandbox_vcpus)", name);
}

int reg_quota_value_parse(enum reg_quota_key k, const char *s, int64_t *out, kiln_error **err)
{
	uint64_t v;
	char *end;

	if (strcmp(s, "none") == 0) {
		*out = REG_QUOTA_NONE;
		return 0;
	}
	if (keys[k].size) {
		if (kiln_parse_size(s, &v, err) < 0) {
			(*err)->kind = KILN_E_USAGE; /* as the other values' */
			return kiln_error_wrap(err, "quota %s", keys[k].key);
		}
	} else {
		v = strtoull(s, &end, 10);
		if (*s < '0' || *s > '9' || *end)
			return kiln_err(err, KILN_E_USAGE, "quota %s: '%s' is not a whole number (or 'none')", keys[k].key, s);
	}
	if (v > (uint64_t)INT64_MAX / 2)
		return kiln_err(err, KILN_E_USAGE, "quota %s: '%s' is too large", keys[k].key, s);
	if (v < (uint64_t)keys[k].min)
		return kiln_err(err, KILN_E_USAGE, "quota %s: at least %d (or 'none')", keys[k].key, keys[k].min);
	*out = (int64_t)v;
	return 0;
}

/* "*" or a repository name's first component. */
bool reg_quota_team_valid(const char *team)
{
	return strcmp(team, "*") == 0 || (*team && !strchr(team, '/') && oci_name_valid(team));
}

int reg_quota_config_check(const json_t *q, kiln_error **err)
{
	const char *team, *k;
	json_t *o, *v;

	if (!json_is_object(q))
		return kiln_err(err, KILN_E_INVALID, "quotas: want an object of teams (or \"*\"), each an object of quotas");
	json_object_foreach((json_t *)q, team, o) {
		if (!reg_quota_team_valid(team))
			return kiln_err(err, KILN_E_INVALID, "quotas.%s: not a team name (a repository's first component) or \"*\"",
					team);
		if (!json_is_object(o))
			return kiln_err(err, KILN_E_INVALID, "quotas.%s: want an object of quotas", team);
		json_object_foreach(o, k, v) {
			enum reg_quota_key key = REG_QUOTA_BYTES;
			int64_t x;

			if (reg_quota_key_parse(k, &key, err) < 0) {
				(*err)->kind = KILN_E_INVALID; /* a bad file, not a bad argument */
				return kiln_error_wrap(err, "quotas.%s.%s", team, k);
			}
			if (json_is_null(v))
				continue;
			if (json_is_integer(v) && json_integer_value(v) >= keys[key].min &&
			    json_integer_value(v) <= INT64_MAX / 2)
				continue;
			if (json_is_string(v) && reg_quota_value_parse(key, json_string_value(v), &x, err) == 0)
				continue;
			kiln_error_clear(err);
			return kiln_err(err, KILN_E_INVALID, "quotas.%s.%s: want a number of %d or more%s, or null (no limit)",
					team, k, keys[key].min, keys[key].size ? " (or a size such as \"10G\")" : "");
		}
	}
	return 0;
}

/* Stored bytes and repositories are counted in meta.db; the S3 backend keeps
 * its metadata in the bucket, where no transaction could hold a count. */
int reg_quota_backend_check(const struct reg_config *c, enum reg_quota_key only, kiln_error **err)
{
	const char *team;
	json_t *o;

	if (c->s3_endpoint == NULL)
		return 0;
	if (only == REG_QUOTA_BYTES || only == REG_QUOTA_REPOS)
		goto refuse;
	json_object_foreach(c->quotas, team, o)
		if (json_object_get(o, "bytes") || json_object_get(o, "repos")) {
			only = json_object_get(o, "bytes") ? REG_QUOTA_BYTES : REG_QUOTA_REPOS;
			goto refuse;
		}
	return 0;
refuse:
	return kiln_err(err, KILN_E_INVALID, "quota %s: not enforced with the s3 backend (its metadata is in the bucket);"
			" quotas on bytes and repos need the filesystem backend", keys[only].key);
}

/* The config's value of team's k: 1 set (*v, REG_QUOTA_NONE for null), 0 not. */
static int from_config(const json_t *q, const char *team, enum reg_quota_key k, int64_t *v)
{
	const json_t *x = json_object_get(json_object_get(q, team), keys[k].key);

	if (x == NULL)
		return 0;
	if (json_is_integer(x))
		*v = json_integer_value(x);
	else if (json_is_string(x))
		reg_quota_value_parse(k, json_string_value(x), v, NULL); /* checked at load */
	else
		*v = REG_QUOTA_NONE;
	return 1;
}

int reg_db_quota_locked(reg_db *db, const char *team, struct reg_quota *q, kiln_error **err)
{
	const char *who[2] = { "*", team };
	sqlite3_stmt *st;
	int rc;

	for (int k = 0; k < REG_QUOTA_N; k++) {
		q->v[k] = REG_QUOTA_NONE;
		q->src[k] = REG_QUOTA_UNSET;
	}
	st = reg_db_prep(db, "SELECT key, value FROM quotas WHERE team = ?", err);
	if (st == NULL)
		return -1;
	for (int w = 0; w < 2; w++) {
		for (int k = 0; k < REG_QUOTA_N; k++)
			if (from_config(db->quotas, who[w], (enum reg_quota_key)k, &q->v[k]))
				q->src[k] = w ? REG_QUOTA_CONFIG : REG_QUOTA_CONFIG_ALL;
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, who[w], -1, SQLITE_STATIC);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			enum reg_quota_key k = REG_QUOTA_BYTES;
			if (reg_quota_key_parse((const char *)sqlite3_column_text(st, 0), &k, NULL) < 0)
				continue; /* a key a newer kiln set */
			q->v[k] = sqlite3_column_int64(st, 1);
			q->src[k] = w ? REG_QUOTA_DB : REG_QUOTA_DB_ALL;
		}
		if (rc != SQLITE_DONE) {
			sqlite3_finalize(st);
			return reg_db_fail(db, err, "read quotas");
		}
	}
	sqlite3_finalize(st);
	return 0;
}

/* The repositories of team: its name alone, or "team/..." (a range on the
 * unique index: '0' follows '/'). */
#define TEAM_REPOS "SELECT id FROM repos WHERE name = ?1 OR (name > ?1 || '/' AND name < ?1 || '0')"

int reg_db_team_bytes_locked(reg_db *db, const char *team, int64_t *bytes, kiln_error **err)
{
	/* the same count as reg_db_team_usage's: each blob and manifest once */
	sqlite3_stmt *st = reg_db_prep(db,
		"SELECT (SELECT coalesce(sum(size), 0) FROM (SELECT DISTINCT digest, size FROM blob_links"
		" WHERE repo IN (" TEAM_REPOS "))) + (SELECT coalesce(sum(size), 0) FROM (SELECT DISTINCT digest, size"
		" FROM manifests WHERE repo IN (" TEAM_REPOS ")))", err);
	int rc;

	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, team, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	*bytes = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	sqlite3_finalize(st);
	return rc == SQLITE_ROW ? 0 : reg_db_fail(db, err, "usage of a team");
}

/* Does the team hold digest already (a blob, or with manifests a manifest)? 1/0/-1. */
int reg_db_team_holds_locked(reg_db *db, const char *team, const char *digest, bool manifest, kiln_error **err)
{
	sqlite3_stmt *st = reg_db_prep(db, manifest ? "SELECT 1 FROM manifests WHERE digest = ?2 AND repo IN (" TEAM_REPOS ") LIMIT 1"
						    : "SELECT 1 FROM blob_links WHERE digest = ?2 AND repo IN (" TEAM_REPOS ") LIMIT 1",
				       err);
	int rc;

	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, team, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, digest, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return reg_db_fail(db, err, "team's blobs");
	return rc == SQLITE_ROW;
}

void reg_team_of(const char *repo, char team[REG_TEAM_MAX])
{
	size_t n = strcspn(repo, "/");

	snprintf(team, REG_TEAM_MAX, "%.*s", (int)(n < REG_TEAM_MAX ? n : REG_TEAM_MAX - 1), repo);
}

static void human(char buf[32], int64_t v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", d, unit[u]);
}

int reg_db_quota_add_locked(reg_db *db, struct reg_quota_acc *a, const char *repo, const char *digest, int64_t size,
			    bool manifest, kiln_error **err)
{
	char u[32], l[32], z[32];
	int held;

	if (!a->loaded) {
		struct reg_quota q;
		reg_team_of(repo, a->team);
		if (reg_db_quota_locked(db, a->team, &q, err) < 0)
			return -1;
		a->limit = q.v[REG_QUOTA_BYTES];
		a->used = -1;
		a->loaded = true;
	}
	if (a->limit == REG_QUOTA_NONE)
		return 0;
	if ((held = reg_db_team_holds_locked(db, a->team, digest, manifest, err)) != 0)
		return held < 0 ? -1 : 0; /* stored once per team: nothing more */
	/* once per set of links: the ones linked since are in a->used */
	if (a->used < 0 && reg_db_team_bytes_locked(db, a->team, &a->used, err) < 0)
		return -1;
	if (a->used + size <= a->limit) {
		a->used += size;
		return 0;
	}
	human(u, a->used);
	human(l, a->limit);
	human(z, size);
	return kiln_err(err, KILN_E_QUOTA,
			"quota exceeded: team '%s' stores %s (%lld bytes) of its stored-bytes quota of %s (%lld bytes);"
			" %s %s of %s (%lld bytes) would pass it", a->team, u, (long long)a->used, l, (long long)a->limit,
			manifest ? "manifest" : "blob", digest, z, (long long)size);
}

int reg_db_quota_repo_locked(reg_db *db, const char *repo, kiln_error **err)
{
	char team[REG_TEAM_MAX];
	struct reg_quota q;
	sqlite3_stmt *st;
	int64_t n;

	reg_team_of(repo, team);
	if (reg_db_quota_locked(db, team, &q, err) < 0)
		return -1;
	if (q.v[REG_QUOTA_REPOS] == REG_QUOTA_NONE)
		return 0;
	st = reg_db_prep(db, "SELECT count(*) FROM (" TEAM_REPOS ")", err);
	if (st == NULL)
		return -1;
	sqlite3_bind_text(st, 1, team, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_finalize(st);
		return reg_db_fail(db, err, "repositories of a team");
	}
	n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (n < q.v[REG_QUOTA_REPOS])
		return 0;
	return kiln_err(err, KILN_E_QUOTA,
			"quota exceeded: team '%s' has %lld of its %lld repositories; repository %s would pass it", team,
			(long long)n, (long long)q.v[REG_QUOTA_REPOS], repo);
}

/* ---- administration and the services' view ---- */

int reg_quota_get(const struct reg_config *c, const char *team, struct reg_quota *q, kiln_error **err)
{
	reg_db *db;
	int ret;

	if (!reg_quota_team_valid(team))
		return kiln_err(err, KILN_E_USAGE, "'%s' is not a team name (a repository's first component) or \"*\"", team);
	if ((db = reg_db_open_cfg(c, err)) == NULL)
		return -1;
	pthread_mutex_lock(&db->lock);
	ret = reg_db_quota_locked(db, team, q, err);
	pthread_mutex_unlock(&db->lock);
	reg_db_close(db);
	return ret;
}

int reg_quota_set(const struct reg_config *c, const char *team, enum reg_quota_key k, int64_t v, bool clear,
		  kiln_error **err)
{
	sqlite3_stmt *st;
	reg_db *db;
	int ret = 0;

	if (!reg_quota_team_valid(team))
		return kiln_err(err, KILN_E_USAGE, "'%s' is not a team name (a repository's first component) or \"*\"", team);
	if (!clear && reg_quota_backend_check(c, k, err) < 0)
		return -1;
	if ((db = reg_db_open_cfg(c, err)) == NULL)
		return -1;
	pthread_mutex_lock(&db->lock);
	st = reg_db_prep(db, clear ? "DELETE FROM quotas WHERE team = ?1 AND key = ?2"
				   : "INSERT OR REPLACE INTO quotas(team, key, value) VALUES(?1, ?2, ?3)", err);
	if (st == NULL) {
		ret = -1;
	} else {
		sqlite3_bind_text(st, 1, team, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, keys[k].key, -1, SQLITE_STATIC);
		if (!clear)
			sqlite3_bind_int64(st, 3, v);
		if (sqlite3_step(st) != SQLITE_DONE)
			ret = reg_db_fail(db, err, "store quota");
		sqlite3_finalize(st);
	}
	pthread_mutex_unlock(&db->lock);
	reg_db_close(db);
	return ret;
}

int reg_server_quota(reg_server *s, const char *team, struct reg_quota *q, kiln_error **err)
{
	int ret;

	pthread_mutex_lock(&s->db->lock);
	ret = reg_db_quota_locked(s->db, team, q, err);
	pthread_mutex_unlock(&s->db->lock);
	return ret;
}

static bool listed(const kiln_strv *v, const char *s)
{
	for (size_t i = 0; i < v->n; i++)
		if (strcmp(v->v[i], s) == 0)
			return true;
	return false;
}

int reg_server_quota_teams(reg_server *s, enum reg_quota_key k, kiln_strv *teams, kiln_error **err)
{
	const char *team;
	json_t *o;
	sqlite3_stmt *st;
	int rc;

	json_object_foreach((json_t *)s->cfg.quotas, team, o)
		if (json_object_get(o, keys[k].key) && strcmp(team, "*") != 0)
			kiln_strv_push(teams, team);
	pthread_mutex_lock(&s->db->lock);
	st = reg_db_prep(s->db, "SELECT team FROM quotas WHERE key = ? AND team <> '*'", err);
	if (st == NULL) {
		pthread_mutex_unlock(&s->db->lock);
		return -1;
	}
	sqlite3_bind_text(st, 1, keys[k].key, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (!listed(teams, (const char *)sqlite3_column_text(st, 0)))
			kiln_strv_push(teams, (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	rc = rc == SQLITE_DONE ? 0 : reg_db_fail(s->db, err, "teams with quotas");
	pthread_mutex_unlock(&s->db->lock);
	return rc;
}
