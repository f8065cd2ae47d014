/* plan_graph.c — the stage graph: each stage's dependencies (its FROM
 * stage, COPY --from and RUN --mount from= stages), cycle detection as
 * BuildKit's hasCircularDependency (but naming the whole cycle and the
 * instruction that closes it), the --target and the build order: only what
 * the target needs, dependencies first. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/internal.h"

enum { WHITE, GRAY, BLACK };

struct walk {
	struct dfp_ctx *c;
	int *color;
	int *path;
	size_t n_path;
};

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

static char *stage_label(const struct df_stage *st)
{
	return st->name ? kiln_xstrdup(st->name) : kiln_xasprintf("stage-%d", st->index);
}

static const struct df_node *edge_node(const struct dfp_ctx *c, int from, int to)
{
	for (size_t i = 0; i < c->n_edges; i++)
		if (c->edges[i].from == from && c->edges[i].to == to)
			return c->edges[i].node;
	return NULL;
}

static int cycle_error(struct walk *w, int from, int to, kiln_error **err)
{
	struct df_plan *p = w->c->plan;
	kiln_buf chain = KILN_BUF_INIT;
	char *label = stage_label(&p->stages[to]);
	size_t k = 0;

	while (k < w->n_path && w->path[k] != to)
		k++;
	for (; k < w->n_path; k++) {
		char *l = stage_label(&p->stages[w->path[k]]);
		kiln_buf_addf(&chain, "%s -> ", l);
		free(l);
	}
	kiln_buf_adds(&chain, label);
	dfp_fail(w->c, edge_node(w->c, from, to), err, "circular dependency detected on stage: %s (%s)", label,
		 chain.buf);
	free(label);
	kiln_buf_free(&chain);
	return -1;
}

static int visit(struct walk *w, int s, kiln_error **err)
{
	struct df_stage *st = &w->c->plan->stages[s];

	w->color[s] = GRAY;
	w->path[w->n_path++] = s;
	for (size_t i = 0; i < st->n_deps; i++) {
		int d = st->deps[i];
		if (w->color[d] == GRAY)
			return cycle_error(w, s, d, err);
		if (w->color[d] == WHITE && visit(w, d, err) < 0)
			return -1;
	}
	w->color[s] = BLACK;
	w->n_path--;
	return 0;
}

/* Post-order from the target: every stage after the stages it needs. */
static void order_from(struct df_plan *p, int s, bool *seen)
{
	struct df_stage *st = &p->stages[s];

	seen[s] = true;
	for (size_t i = 0; i < st->n_deps; i++)
		if (!seen[st->deps[i]])
			order_from(p, st->deps[i], seen);
	p->order[p->n_order++] = s;
	st->reachable = true;
}

static int find_target(struct dfp_ctx *c, kiln_error **err)
{
	struct df_plan *p = c->plan;
	const char *t = c->opts->target;
	kiln_buf names = KILN_BUF_INIT;
	bool digits = t && *t;

	if (!t) {
		p->target = (int)p->n_stages - 1;
		return 0;
	}
	p->target = dfp_stage_by_name(p, t);
	for (const char *q = t; *q; q++)
		digits &= isdigit((unsigned char)*q) != 0;
	if (p->target < 0 && digits && strlen(t) < 10 && strtoul(t, NULL, 10) < p->n_stages)
		p->target = (int)strtoul(t, NULL, 10);
	if (p->target >= 0)
		return 0;
	for (size_t i = 0; i < p->n_stages; i++) {
		if (p->stages[i].name)
			kiln_buf_addf(&names, "%s%s", i ? ", " : "", p->stages[i].name);
		else
			kiln_buf_addf(&names, "%s%zu (unnamed)", i ? ", " : "", i);
	}
	kiln_err(err, KILN_E_NOTFOUND, "target stage \"%s\" could not be found; the stages are: %s", t, names.buf);
	kiln_buf_free(&names);
	return -1;
}

int dfp_graph(struct dfp_ctx *c, kiln_error **err)
{
	struct df_plan *p = c->plan;
	struct walk w = { c, NULL, NULL, 0 };
	bool *seen = NULL;
	int rc = -1;

	for (size_t i = 0; i < c->n_edges; i++) {
		struct df_stage *st = &p->stages[c->edges[i].from];
		bool have = false;
		for (size_t k = 0; k < st->n_deps; k++)
			have |= st->deps[k] == c->edges[i].to;
		if (have)
			continue;
		st->deps = kiln_xrealloc(st->deps, (st->n_deps + 1) * sizeof(*st->deps));
		st->deps[st->n_deps++] = c->edges[i].to;
	}
	for (size_t i = 0; i < p->n_stages; i++)
		if (p->stages[i].n_deps > 1)
			qsort(p->stages[i].deps, p->stages[i].n_deps, sizeof(int), cmp_int);

	w.color = kiln_xcalloc(p->n_stages, sizeof(*w.color));
	w.path = kiln_xcalloc(p->n_stages, sizeof(*w.path));
	for (size_t i = 0; i < p->n_stages; i++)
		if (w.color[i] == WHITE && visit(&w, (int)i, err) < 0)
			goto out;
	if (find_target(c, err) < 0)
		goto out;
	seen = kiln_xcalloc(p->n_stages, sizeof(*seen));
	p->order = kiln_xcalloc(p->n_stages, sizeof(*p->order));
	order_from(p, p->target, seen);
	rc = 0;
out:
	free(seen);
	free(w.color);
	free(w.path);
	return rc;
}
