/* plan_json.c — the plan as a stable JSON document (keys in a fixed order,
 * absent strings as null, stage references as indexes or -1) and freeing
 * a plan.  The format is described in docs/dockerfile-plan.md. */
#include <stdlib.h>

#include "dockerfile-parser/internal.h"

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

static json_t *strv_json(const kiln_strv *sv)
{
	json_t *a = json_array();

	for (size_t i = 0; i < sv->n; i++)
		json_array_append_new(a, json_string(sv->v[i]));
	return a;
}

static json_t *kvs_json(const struct df_kv *kv, size_t n, const char *k, const char *v)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++) {
		json_t *o = json_object();
		json_object_set_new(o, k, json_string(kv[i].key));
		json_object_set_new(o, v, str_or_null(kv[i].value));
		json_array_append_new(a, o);
	}
	return a;
}

static json_t *ints_json(const int *v, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static json_t *step_json(const struct df_step *st)
{
	json_t *o = json_object(), *h = json_array();

	json_object_set_new(o, "instruction", json_string(df_kind_name(st->kind)));
	json_object_set_new(o, "line", json_integer(st->node ? st->node->start_line : 0));
	json_object_set_new(o, "end_line", json_integer(st->node ? st->node->end_line : 0));
	json_object_set_new(o, "original", str_or_null(st->node ? st->node->original : NULL));
	json_object_set_new(o, "args", strv_json(&st->args));
	json_object_set_new(o, "exec_form", json_boolean(st->exec_form));
	json_object_set_new(o, "flags", kvs_json(st->flags, st->n_flags, "name", "value"));
	json_object_set_new(o, "kvs", kvs_json(st->kvs, st->n_kvs, "key", "value"));
	for (size_t i = 0; i < st->n_heredocs; i++) {
		json_t *d = json_object();
		json_object_set_new(d, "name", json_string(st->heredocs[i].name));
		json_object_set_new(d, "content", json_string(st->heredocs[i].content));
		json_object_set_new(d, "expand", json_boolean(st->heredocs[i].expand));
		json_object_set_new(d, "chomp", json_boolean(st->heredocs[i].chomp));
		json_array_append_new(h, d);
	}
	json_object_set_new(o, "heredocs", h);
	json_object_set_new(o, "env", strv_json(&st->env));
	json_object_set_new(o, "workdir", str_or_null(st->workdir));
	json_object_set_new(o, "user", str_or_null(st->user));
	json_object_set_new(o, "shell", strv_json(&st->shell));
	json_object_set_new(o, "from_stage", json_integer(st->from_stage));
	json_object_set_new(o, "from_image", str_or_null(st->from_image));
	if (st->kind == DF_RUN) {
		json_t *m = json_array();
		for (size_t i = 0; i < st->n_mounts; i++)
			json_array_append_new(m, dfp_mount_json(&st->mounts[i]));
		json_object_set_new(o, "mounts", m);
	}
	return o;
}

json_t *df_plan_to_json(const struct df_plan *plan)
{
	json_t *root = json_object(), *stages = json_array();
	const struct df_stage *t = plan->target >= 0 ? &plan->stages[plan->target] : NULL;

	json_object_set_new(root, "target", json_integer(plan->target));
	json_object_set_new(root, "target_name", str_or_null(t ? t->name : NULL));
	json_object_set_new(root, "order", ints_json(plan->order, plan->n_order));
	json_object_set_new(root, "global_args", kvs_json(plan->global_args, plan->n_global_args, "key", "value"));
	for (size_t i = 0; i < plan->n_stages; i++) {
		const struct df_stage *st = &plan->stages[i];
		json_t *o = json_object(), *steps = json_array();

		json_object_set_new(o, "index", json_integer(st->index));
		json_object_set_new(o, "name", str_or_null(st->name));
		json_object_set_new(o, "base", str_or_null(st->base));
		json_object_set_new(o, "base_stage", json_integer(st->base_stage));
		json_object_set_new(o, "platform", str_or_null(st->platform));
		json_object_set_new(o, "line", json_integer(st->node ? st->node->start_line : 0));
		json_object_set_new(o, "reachable", json_boolean(st->reachable));
		json_object_set_new(o, "deps", ints_json(st->deps, st->n_deps));
		for (size_t k = 0; k < st->n_steps; k++)
			json_array_append_new(steps, step_json(&st->steps[k]));
		json_object_set_new(o, "steps", steps);
		json_array_append_new(stages, o);
	}
	json_object_set_new(root, "stages", stages);
	json_object_set_new(root, "warnings", strv_json(&plan->warnings));
	return root;
}

static void free_kvs(struct df_kv *kv, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(kv[i].key);
		free(kv[i].value);
	}
	free(kv);
}

static void free_step(struct df_step *st)
{
	kiln_strv_free(&st->args);
	free_kvs(st->flags, st->n_flags);
	free_kvs(st->kvs, st->n_kvs);
	for (size_t i = 0; i < st->n_heredocs; i++) {
		free(st->heredocs[i].name);
		free(st->heredocs[i].content);
	}
	free(st->heredocs);
	kiln_strv_free(&st->env);
	free(st->workdir);
	free(st->user);
	kiln_strv_free(&st->shell);
	free(st->from_image);
	for (size_t i = 0; i < st->n_mounts; i++)
		df_mount_free(&st->mounts[i]);
	free(st->mounts);
}

void df_plan_free(struct df_plan *plan)
{
	if (!plan)
		return;
	for (size_t i = 0; i < plan->n_stages; i++) {
		struct df_stage *st = &plan->stages[i];
		for (size_t k = 0; k < st->n_steps; k++)
			free_step(&st->steps[k]);
		free(st->steps);
		free(st->name);
		free(st->base);
		free(st->platform);
		free(st->deps);
	}
	free(plan->stages);
	free(plan->order);
	free_kvs(plan->global_args, plan->n_global_args);
	kiln_strv_free(&plan->warnings);
	for (size_t i = 0; i < plan->n_triggers; i++)
		df_ast_free(plan->triggers[i]);
	free(plan->triggers);
	free(plan);
}
