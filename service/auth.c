/* auth.c — which team a request builds for: the registry's tokens with the
 * build action on a namespace (Authorization, or X-API-Key as E2B's clients
 * send it), asked through the registry's hook (reg_req_identify), and the
 * service's settings from the "build" key of the registry config. */
#include <stdlib.h>
#include <string.h>

#include "service/internal.h"
#include "sign/sign.h"

char *svc_auth_team(reg_req *r, const char *want, unsigned *status, kiln_error **err)
{
	return svc_auth_team_for(r, want, REG_BUILD, status, err);
}

char *svc_auth_team_for(reg_req *r, const char *want, enum reg_action action, unsigned *status, kiln_error **err)
{
	const char *an = action == REG_SANDBOX ? "sandbox" : "build";
	char *ns = NULL, *team = NULL;
	int who = reg_req_identify(r, err);

	*status = 500;
	if (who < 0 && who != -2 && who != -3)
		return NULL;
	if (who == -3) {
		*status = 429;
		kiln_err(err, KILN_E_LIMIT, "too many failed authentications");
		return NULL;
	}
	if (who != 1) {
		*status = 401;
		kiln_err(err, KILN_E_INVALID, who == 0 ? "authentication required" : "invalid, expired or revoked credentials");
		return NULL;
	}
	if (want) {
		if (!kiln_ref_name_valid(want) || strchr(want, '/')) {
			*status = 400;
			kiln_err(err, KILN_E_INVALID, "team '%s': want one lowercase name component", want);
			return NULL;
		}
		if (!reg_req_allows(r, want, action)) {
			*status = 403;
			kiln_err(err, KILN_E_INVALID, "the credential does not grant %s on team '%s'", an, want);
			return NULL;
		}
		reg_req_set_team(r, want);
		return kiln_xstrdup(want);
	}
	ns = reg_req_namespaces(r, action);
	if (ns && strcmp(ns, "*") == 0) {
		free(ns);
		reg_req_set_team(r, "default");
		return kiln_xstrdup("default");
	}
	if (ns == NULL || strchr(ns, ';') || strchr(ns, '/') || strcmp(ns, "*") == 0) {
		*status = 403;
		if (ns)
			kiln_err(err, KILN_E_INVALID, "the credential has the %s action for several teams: name one (team)", an);
		else
			kiln_err(err, KILN_E_INVALID, "the credential has no %s scope (kiln token create --scope TEAM:%s,...)", an,
				 an);
		free(ns);
		return NULL;
	}
	team = ns;
	reg_req_set_team(r, team);
	return team;
}

static int get_uint(const json_t *v, const char *key, unsigned *out, kiln_error **err)
{
	if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1024)
		return kiln_err(err, KILN_E_INVALID, "build.%s: want a number from 1 to 1024", key);
	*out = (unsigned)json_integer_value(v);
	return 0;
}

static int get_size(const json_t *v, const char *key, uint64_t *out, kiln_error **err)
{
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && kiln_parse_size(json_string_value(v), out, err) == 0)
		return 0;
	kiln_error_clear(err);
	return kiln_err(err, KILN_E_INVALID, "build.%s: want a size (bytes, or like \"1G\")", key);
}

/* A signing key the config names: readable and private now, not at the first build. */
static int check_key(const json_t *v, const char *what, kiln_error **err)
{
	sign_key *k;

	/* absolute: the push that reads it runs in the build's work directory */
	if (!json_is_string(v) || json_string_value(v)[0] != '/')
		return kiln_err(err, KILN_E_INVALID, "build.%s: want the absolute path of a private key file (kiln key "
				"generate)", what);
	if ((k = sign_key_load_private(json_string_value(v), err)) == NULL)
		return kiln_error_wrap(err, "build.%s", what);
	sign_key_free(k);
	return 0;
}

int svc_config_load(struct svc_config *c, const json_t *build, kiln_error **err)
{
	const char *key;
	json_t *v;

	memset(c, 0, sizeof(*c));
	c->host_builds = 2;
	c->team_builds = 2;
	c->time_limit_s = 3600;
	c->context_max = 1ull << 30;
	c->context_files = 200000;
	c->cache_max = 10ull << 30;
	c->cache_age_s = 7 * 86400;
	c->provenance = true;
	if (build == NULL || json_is_boolean(build))
		return 0;
	json_object_foreach((json_t *)build, key, v) {
		int r = 0;
		if (strcmp(key, "db") == 0 || strcmp(key, "host_id") == 0 || strcmp(key, "state_dir") == 0 ||
		    strcmp(key, "builder_id") == 0) {
			if (!json_is_string(v) || !*json_string_value(v))
				return kiln_err(err, KILN_E_INVALID, "build.%s: want a string", key);
			*(strcmp(key, "db") == 0	  ? &c->db
			  : strcmp(key, "host_id") == 0 ? &c->host_id
			  : strcmp(key, "builder_id") == 0 ? &c->builder_id
							 : &c->state_dir) = json_string_value(v);
		} else if (strcmp(key, "host_builds") == 0) {
			r = get_uint(v, key, &c->host_builds, err);
		} else if (strcmp(key, "team_builds") == 0) {
			r = get_uint(v, key, &c->team_builds, err);
		} else if (strcmp(key, "fetch_private") == 0 || strcmp(key, "provenance") == 0) {
			if (!json_is_boolean(v))
				return kiln_err(err, KILN_E_INVALID, "build.%s: want true or false", key);
			*(strcmp(key, "provenance") == 0 ? &c->provenance : &c->fetch_private) = json_is_true(v);
		} else if (strcmp(key, "sign_key") == 0) {
			if (check_key(v, key, err) < 0)
				return -1;
			c->sign_key = json_string_value(v);
		} else if (strcmp(key, "team_sign_keys") == 0) {
			const char *team;
			json_t *f;
			if (!json_is_object(v))
				return kiln_err(err, KILN_E_INVALID, "build.%s: want {\"TEAM\": \"KEY FILE\"}", key);
			json_object_foreach(v, team, f)
				if (check_key(f, "team_sign_keys", err) < 0)
					return kiln_error_wrap(err, "team %s", team);
			c->team_sign_keys = v;
		} else if (strcmp(key, "context_files") == 0) {
			r = get_uint(v, key, &c->context_files, err);
		} else if (strcmp(key, "time_limit_s") == 0 || strcmp(key, "cache_age_s") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1)
				return kiln_err(err, KILN_E_INVALID, "build.%s: want a positive number of seconds", key);
			*(strcmp(key, "time_limit_s") == 0 ? &c->time_limit_s : &c->cache_age_s) = json_integer_value(v);
		} else if (strcmp(key, "context_max") == 0) {
			r = get_size(v, key, &c->context_max, err);
		} else if (strcmp(key, "cache_max") == 0) {
			r = get_size(v, key, &c->cache_max, err);
		} else {
			return kiln_err(err, KILN_E_INVALID, "build: unknown key '%s'", key);
		}
		if (r < 0)
			return -1;
	}
	return 0;
}

const char *svc_state_name(enum svc_state st)
{
	static const char *const names[] = { "queued", "building", "done", "failed", "cancelled" };

	return (unsigned)st < 5 ? names[st] : "unknown";
}

unsigned svc_err_status(const kiln_error *err)
{
	if (kiln_error_disk_full(err))
		return 507;
	switch (err ? err->kind : KILN_E_GENERIC) {
	case KILN_E_NOTFOUND: return 404;
	case KILN_E_INVALID: case KILN_E_USAGE: return 400;
	case KILN_E_EXISTS: return 409;
	case KILN_E_LIMIT: return 413;
	case KILN_E_QUOTA: case KILN_E_DENIED: return 403;
	default: return 500;
	}
}

const char *svc_err_reply(kiln_error *err, unsigned status, const char *what)
{
	const char *msg = err ? kiln_error_message(err) : "unknown error";

	if (status < 500)
		return msg;
	/* the operator's to fix, with the paths in the server's log; a client
	 * told of a full disk learns to retry, not where the server keeps data */
	kiln_warn("%s: %s", what, msg);
	if (status == 507)
		return "the server's storage is full (no space left on device): nothing was stored; retry once space "
		       "is freed";
	return msg;
}
