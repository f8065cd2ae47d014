/* policy.c — the runtime host's policy file (sign.h, docs/security.md): per
 * registry or repository prefix, the public keys that must have signed and
 * the builder their signed provenance must name.  Read and checked whole at load, keys
 * included, so a typo refuses everything rather than accepting it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sign/sign.h"

struct scope {
	char *name;
	bool reject;
	sign_key **keys;
	size_t nkeys;
	char *builder;
	bool match_repository;
};

struct sign_policy {
	char *path;
	bool reject_default;
	struct scope *v;
	size_t n;
};

static sign_key *load_key(const char *policy, const char *file, kiln_error **err)
{
	char *path, *slash = strrchr(policy, '/');
	sign_key *k;

	if (file[0] == '/' || slash == NULL)
		path = kiln_xstrdup(file);
	else
		path = kiln_xasprintf("%.*s/%s", (int)(slash - policy), policy, file);
	k = sign_key_load_public(path, err);
	free(path);
	return k;
}

static int parse_scope(const char *path, const char *name, json_t *v, struct scope *s, kiln_error **err)
{
	json_t *keys = json_object_get(v, "keys"), *k, *rej = json_object_get(v, "reject");
	const char *key, *builder = kiln_json_str(v, "builder"), *ident = kiln_json_str(v, "identity");
	size_t i;

	s->name = kiln_xstrdup(name);
	if (!json_is_object(v))
		return kiln_err(err, KILN_E_INVALID, "scope %s: want an object", name);
	json_object_foreach(v, key, k)
		if (strcmp(key, "keys") && strcmp(key, "reject") && strcmp(key, "builder") && strcmp(key, "identity"))
			return kiln_err(err, KILN_E_INVALID, "scope %s: unknown field '%s'", name, key);
	if ((keys && !json_is_array(keys)) || (rej && !json_is_boolean(rej)) ||
	    (json_object_get(v, "builder") && !builder))
		return kiln_err(err, KILN_E_INVALID, "scope %s: keys is a list of files, reject a boolean, builder a "
				"string", name);
	if (json_object_get(v, "identity") && (!ident || (strcmp(ident, "exact") && strcmp(ident, "repository"))))
		return kiln_err(err, KILN_E_INVALID, "scope %s: identity: want \"exact\" or \"repository\"", name);
	s->match_repository = ident && strcmp(ident, "repository") == 0;
	s->builder = builder ? kiln_xstrdup(builder) : NULL;
	s->reject = json_is_true(rej);
	s->keys = kiln_xcalloc(json_array_size(keys) + 1, sizeof(*s->keys));
	json_array_foreach(keys, i, k) {
		if (!json_is_string(k))
			return kiln_err(err, KILN_E_INVALID, "scope %s: keys[%zu] is not a file name", name, i);
		if ((s->keys[s->nkeys] = load_key(path, json_string_value(k), err)) == NULL)
			return kiln_error_wrap(err, "scope %s", name);
		s->nkeys++;
	}
	if (s->builder && s->nkeys == 0)
		return kiln_err(err, KILN_E_INVALID, "scope %s: a builder needs the keys that sign its provenance", name);
	if (!s->reject && s->nkeys == 0)
		return kiln_err(err, KILN_E_INVALID, "scope %s: no keys (want \"keys\" or \"reject\": true)", name);
	return 0;
}

static char *default_path(void)
{
	const char *env = getenv("KILN_POLICY");
	char *home, *p;

	if (env && *env)
		return kiln_xstrdup(env);
	home = kiln_home();
	p = kiln_xasprintf("%s/policy.json", home);
	free(home);
	if (access(p, F_OK) == 0)
		return p;
	free(p);
	if (access("/etc/kiln/policy.json", F_OK) == 0)
		return kiln_xstrdup("/etc/kiln/policy.json");
	return NULL;
}

sign_policy *sign_policy_load(const char *path, kiln_error **err)
{
	sign_policy *p = kiln_xcalloc(1, sizeof(*p));
	json_t *j = NULL, *scopes, *v;
	const char *def, *key;

	p->path = path ? kiln_xstrdup(path) : default_path();
	if (p->path == NULL)
		return p;
	if ((j = kiln_json_load_file(p->path, err)) == NULL)
		goto fail;
	json_object_foreach(j, key, v)
		if (strcmp(key, "default") && strcmp(key, "scopes")) {
			kiln_err(err, KILN_E_INVALID, "unknown field '%s'", key);
			goto fail;
		}
	def = kiln_json_str(j, "default");
	if (json_object_get(j, "default") && (!def || (strcmp(def, "accept") && strcmp(def, "reject")))) {
		kiln_err(err, KILN_E_INVALID, "default: want \"accept\" or \"reject\"");
		goto fail;
	}
	p->reject_default = def && strcmp(def, "reject") == 0;
	scopes = json_object_get(j, "scopes");
	if (scopes && !json_is_object(scopes)) {
		kiln_err(err, KILN_E_INVALID, "scopes: want an object");
		goto fail;
	}
	p->v = kiln_xcalloc(json_object_size(scopes) + 1, sizeof(*p->v));
	json_object_foreach(scopes, key, v) {
		p->n++;
		if (parse_scope(p->path, key, v, &p->v[p->n - 1], err) < 0)
			goto fail;
	}
	json_decref(j);
	return p;
fail:
	kiln_error_wrap(err, "policy %s", p->path);
	json_decref(j);
	sign_policy_free(p);
	return NULL;
}

void sign_policy_free(sign_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		for (size_t k = 0; k < p->v[i].nkeys; k++)
			sign_key_free(p->v[i].keys[k]);
		free(p->v[i].keys);
		free(p->v[i].name);
		free(p->v[i].builder);
	}
	free(p->v);
	free(p->path);
	free(p);
}

const char *sign_policy_path(const sign_policy *p)
{
	return p->path;
}

void sign_policy_rule(const sign_policy *p, const char *host, const char *repo, struct sign_rule *out)
{
	char *full = kiln_xasprintf("%s/%s", host, repo);
	const struct scope *best = NULL;
	size_t best_len = 0;

	for (size_t i = 0; i < p->n; i++) {
		size_t n = strlen(p->v[i].name);
		/* HOST, HOST/team or HOST/team/app: whole components only */
		if (strncmp(full, p->v[i].name, n) == 0 && (full[n] == 0 || full[n] == '/') && n >= best_len) {
			best = &p->v[i];
			best_len = n;
		}
	}
	memset(out, 0, sizeof(*out));
	if (best) {
		out->scope = best->name;
		out->reject = best->reject;
		out->keys = best->keys;
		out->nkeys = best->nkeys;
		out->builder = best->builder;
		out->match_repository = best->match_repository;
	} else {
		out->reject = p->reject_default;
	}
	free(full);
}

bool sign_rule_active(const struct sign_rule *r)
{
	return r->reject || r->nkeys > 0;
}
