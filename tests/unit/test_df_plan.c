/* test_df_plan.c — the semantic pass on real Dockerfile text: ARG/ENV
 * scoping, --build-arg, platform ARGs, which instructions expand, heredoc
 * bodies, WORKDIR/USER/SHELL tracking, errors with FILE:LINE:COL. */
#include <stdlib.h>

#include "dockerfile-parser/dockerfile.h"
#include "dockerfile-parser/internal.h"
#include "tests/unit/test.h"

static struct df_ast *g_ast;

/* Parse + plan; the AST stays alive (steps point into it) until done(). */
static struct df_plan *plan_of(const char *text, const struct df_plan_opts *o, kiln_error **err)
{
	struct df_plan *p = NULL;

	df_ast_free(g_ast);
	g_ast = NULL;
	if (df_parse("Dockerfile", text, strlen(text), &g_ast, err) < 0)
		return NULL;
	if (df_plan_build(g_ast, o, &p, err) < 0)
		return NULL;
	return p;
}

static void done(struct df_plan *p)
{
	df_plan_free(p);
	df_ast_free(g_ast);
	g_ast = NULL;
}

static bool has_env(const struct df_step *st, const char *kv)
{
	for (size_t i = 0; i < st->env.n; i++)
		if (strcmp(st->env.v[i], kv) == 0)
			return true;
	return false;
}

static bool has_env_key(const struct df_step *st, const char *key)
{
	size_t n = strlen(key);
	for (size_t i = 0; i < st->env.n; i++)
		if (strncmp(st->env.v[i], key, n) == 0 && st->env.v[i][n] == '=')
			return true;
	return false;
}

static const char *flag(const struct df_step *st, const char *name)
{
	for (size_t i = 0; i < st->n_flags; i++)
		if (strcmp(st->flags[i].key, name) == 0)
			return st->flags[i].value;
	return NULL;
}

static void print_err(kiln_error *err)
{
	if (err)
		printf("#   error: %s\n", kiln_error_message(err));
}

static void test_arg_scoping(void)
{
	const char *df = "ARG VERSION=1.0\n"
			 "ARG BASE=alpine\n"
			 "FROM ${BASE}:3.19 AS build\n"
			 "RUN echo $VERSION\n"       /* 0: global ARG not in scope */
			 "ARG VERSION\n"             /* 1: inherits the global default */
			 "RUN echo $VERSION\n"       /* 2 */
			 "ARG FOO=bar\n"             /* 3 */
			 "ENV FOO=env-${FOO}\n"      /* 4: ENV sees the ARG */
			 "RUN true\n"                /* 5 */
			 "ARG FOO=again\n"           /* 6: BuildKit: a later ARG wins */
			 "RUN true\n"                /* 7 */
			 "ARG EMPTY\n"               /* 8: no value anywhere */
			 "RUN true\n";               /* 9 */
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_INT(p->n_stages, 1);
	CHECK_STR(p->stages[0].base, "alpine:3.19");
	CHECK_STR(p->stages[0].name, "build");
	CHECK_INT(p->stages[0].n_steps, 10);
	CHECK(!has_env_key(&p->stages[0].steps[0], "VERSION"));
	CHECK(!has_env_key(&p->stages[0].steps[0], "BASE"));
	CHECK_STR(p->stages[0].steps[1].kvs[0].value, "1.0");
	CHECK(has_env(&p->stages[0].steps[2], "VERSION=1.0"));
	CHECK(has_env(&p->stages[0].steps[5], "FOO=env-bar"));
	CHECK(has_env(&p->stages[0].steps[7], "FOO=again"));
	CHECK(p->stages[0].steps[8].kvs[0].value == NULL);
	CHECK(!has_env_key(&p->stages[0].steps[9], "EMPTY"));
	CHECK_INT(p->warnings.n, 0);
	done(p);
}

static void test_build_args(void)
{
	const char *df = "ARG VERSION=1.0\n"
			 "ARG BASE=alpine\n"
			 "FROM ${BASE}:${VERSION}\n"
			 "ARG VERSION\n"
			 "ARG FOO=bar\n"
			 "RUN echo $VERSION $FOO\n";
	const struct df_kv ba[] = { { "BASE", "debian" },    { "VERSION", "12" }, { "FOO", "override" },
				    { "UNUSED", "x" },       { "HTTP_PROXY", "http://proxy:3128" },
				    { "BUILDKIT_INLINE_CACHE", "1" } };
	struct df_plan_opts o = { ba, 6, NULL, NULL, NULL, NULL, NULL };
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, &o, &err);
	const struct df_step *run;

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_STR(p->stages[0].base, "debian:12");
	run = &p->stages[0].steps[2];
	CHECK(has_env(run, "VERSION=12"));
	CHECK(has_env(run, "FOO=override"));
	CHECK(has_env(run, "HTTP_PROXY=http://proxy:3128"));
	/* proxies reach RUN only */
	CHECK(!has_env_key(&p->stages[0].steps[1], "HTTP_PROXY"));
	CHECK_INT(p->warnings.n, 1);
	if (p->warnings.n)
		CHECK(strstr(p->warnings.v[0], "UNUSED") != NULL);
	done(p);
}

static void test_platform_args(void)
{
	const char *df = "FROM --platform=$BUILDPLATFORM golang:1.22 AS build\n"
			 "ARG TARGETOS TARGETARCH\n"
			 "RUN GOOS=$TARGETOS GOARCH=$TARGETARCH go build\n"
			 "FROM --platform=${TARGETPLATFORM} alpine\n"
			 "COPY --from=build /out /out\n"
			 "RUN echo $TARGETARCH\n"
			 "ARG TARGETVARIANT\n"
			 "ARG TARGETPLATFORM\n"
			 "RUN true\n";
	struct df_plan_opts o = { NULL, 0, NULL, "linux/arm", NULL, NULL, NULL };
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, &o, &err);

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_STR(p->stages[0].platform, "linux/amd64");
	CHECK_STR(p->stages[1].platform, "linux/arm/v7");
	CHECK(has_env(&p->stages[0].steps[1], "TARGETARCH=arm"));
	CHECK(has_env(&p->stages[0].steps[1], "TARGETOS=linux"));
	CHECK_INT(p->stages[1].n_steps, 5);
	if (p->stages[1].n_steps < 5)
		goto out;
	CHECK(!has_env_key(&p->stages[1].steps[1], "TARGETARCH"));
	CHECK(has_env(&p->stages[1].steps[4], "TARGETVARIANT=v7"));
	CHECK(has_env(&p->stages[1].steps[4], "TARGETPLATFORM=linux/arm/v7"));
out:
	done(p);

	o.platform = "arm64";
	p = plan_of(df, &o, &err);
	CHECK(p != NULL);
	if (p)
		CHECK(has_env(&p->stages[0].steps[1], "TARGETARCH=arm64"));
	done(p);
	o.platform = "linux/arm64/v8/x";
	CHECK(plan_of(df, &o, &err) == NULL);
	CHECK(err && err->kind == KILN_E_USAGE);
	kiln_error_clear(&err);
	done(NULL);
}

static void test_what_expands(void)
{
	const char *df = "FROM scratch\n"
			 "ENV DIR=/app NAME=kiln PORT=8080\n"
			 "WORKDIR $DIR\n"
			 "COPY --chown=${NAME}:${NAME} --chmod=755 src/$NAME /opt/$NAME/\n"
			 "ADD --checksum=sha256:$NAME https://example.com/$NAME.tgz /tmp/\n"
			 "LABEL org.name=\"$NAME app\" version=${PORT}\n"
			 "EXPOSE $PORT ${PORT}/udp\n"
			 "USER ${NAME}\n"
			 "VOLUME [\"/data/$NAME\"]\n"
			 "STOPSIGNAL SIG${NAME:+TERM}\n"
			 "RUN echo $NAME\n"
			 "CMD echo $NAME\n"
			 "ENTRYPOINT [\"/bin/$NAME\"]\n"
			 "MAINTAINER $NAME\n"
			 "ONBUILD RUN echo $NAME\n"
			 "HEALTHCHECK CMD curl $NAME\n"
			 "SHELL [\"/bin/bash\", \"-c\"]\n"
			 "RUN --mount=type=cache,target=/cache/$NAME,id=$NAME echo\n";
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);
	const struct df_step *s;

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_INT(p->stages[0].n_steps, 17);
	s = p->stages[0].steps;
	CHECK_STR(s[1].args.v[0], "/app");
	CHECK_STR(s[1].workdir, "/app");
	CHECK_STR(flag(&s[2], "chown"), "kiln:kiln");
	CHECK_STR(flag(&s[2], "chmod"), "755");
	CHECK_STR(s[2].args.v[0], "src/kiln");
	CHECK_STR(s[2].args.v[1], "/opt/kiln/");
	CHECK_STR(flag(&s[3], "checksum"), "sha256:kiln");
	CHECK_STR(s[3].args.v[0], "https://example.com/kiln.tgz");
	CHECK_INT(s[4].n_kvs, 2);
	CHECK_STR(s[4].kvs[0].key, "org.name");
	CHECK_STR(s[4].kvs[0].value, "kiln app");
	CHECK_STR(s[4].kvs[1].value, "8080");
	CHECK_INT(s[5].args.n, 2);
	CHECK_STR(s[5].args.v[1], "8080/udp");
	CHECK_STR(s[6].args.v[0], "kiln");
	CHECK_STR(s[6].user, "kiln");
	CHECK_STR(s[7].args.v[0], "/data/kiln");
	CHECK(s[7].exec_form);
	CHECK_STR(s[8].args.v[0], "SIGTERM");
	/* left to the shell / not expanded */
	CHECK_STR(s[9].args.v[0], "echo $NAME");
	CHECK(!s[9].exec_form);
	CHECK(has_env(&s[9], "NAME=kiln"));
	CHECK_STR(s[10].args.v[0], "echo $NAME");
	CHECK_STR(s[11].args.v[0], "/bin/$NAME");
	CHECK_STR(s[12].args.v[0], "$NAME");
	CHECK(strstr(s[13].args.v[0], "echo $NAME") != NULL);
	CHECK_STR(s[14].args.v[0], "CMD");
	CHECK_INT(s[15].shell.n, 2);
	CHECK_STR(flag(&s[16], "mount"), "type=cache,target=/cache/$NAME,id=$NAME"); /* as written */
	CHECK_INT(s[16].n_mounts, 1);
	if (s[16].n_mounts == 1) {
		CHECK_INT(s[16].mounts[0].type, DF_MOUNT_CACHE);
		CHECK_STR(s[16].mounts[0].target, "/cache/kiln");
		CHECK_STR(s[16].mounts[0].id, "kiln");
	}
	CHECK_STR(s[16].shell.v[0], "/bin/bash");
	done(p);
}

static void test_env_sees_previous_values(void)
{
	const char *df = "FROM alpine\nENV a=0\nENV a=1 b=$a\nENV c=\"$a $b\" d='$a'\n";
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_STR(p->stages[0].steps[1].kvs[1].value, "0");
	CHECK(has_env(&p->stages[0].steps[2], "c=1 0"));
	CHECK(has_env(&p->stages[0].steps[2], "d=$a"));
	done(p);
}

static void test_heredoc_and_workdir(void)
{
	const char *df = "FROM alpine\n"
			 "ARG NAME=world\n"
			 "COPY <<EOF /hello\n"
			 "hi $NAME \"quoted\"\n"
			 "EOF\n"
			 "COPY <<'EOF' /raw\n"
			 "raw $NAME\n"
			 "EOF\n"
			 "WORKDIR /a\n"
			 "WORKDIR b\n"
			 "WORKDIR ../c/./d\n"
			 "RUN <<EOF\n"
			 "echo $NAME\n"
			 "EOF\n"
			 "COPY <<-EOT /chomped\n"
			 "\t\tindented $NAME\n"
			 "\tEOT\n";
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);
	const struct df_step *s;

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	s = p->stages[0].steps;
	CHECK_INT(s[1].n_heredocs, 1);
	if (s[1].n_heredocs)
		CHECK_STR(s[1].heredocs[0].content, "hi world \"quoted\"\n");
	CHECK_STR(s[1].args.v[0], "<<EOF");
	CHECK_INT(s[2].n_heredocs, 1);
	if (s[2].n_heredocs)
		CHECK_STR(s[2].heredocs[0].content, "raw $NAME\n");
	CHECK_STR(s[3].workdir, "/a");
	CHECK_STR(s[4].workdir, "/a/b");
	CHECK_STR(s[5].workdir, "/a/c/d");
	CHECK_INT(s[6].n_heredocs, 1);
	if (s[6].n_heredocs)
		CHECK_STR(s[6].heredocs[0].content, "echo $NAME\n");
	CHECK_INT(s[7].n_heredocs, 1);
	if (s[7].n_heredocs)
		CHECK_STR(s[7].heredocs[0].content, "indented world\n");
	done(p);
}

static void test_global_arg_without_value(void)
{
	const char *df = "ARG TAG\nARG REG=docker.io\nFROM $REG/alpine:${TAG:-latest}\nFROM busybox${TAG-}\n";
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_STR(p->stages[0].base, "docker.io/alpine:latest");
	CHECK_STR(p->stages[1].base, "busybox");
	CHECK_INT(p->n_global_args, 10);
	done(p);
}

static void expect_error(const char *df, const struct df_plan_opts *o, const char *want)
{
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, o, &err);

	CHECK(p == NULL);
	CHECK(err != NULL);
	if (err && !strstr(kiln_error_message(err), want))
		printf("#   got:  %s\n#   want: ...%s...\n", kiln_error_message(err), want);
	CHECK(err && strstr(kiln_error_message(err), want));
	kiln_error_free(err);
	done(p);
}

/* RUN --mount parsed once, as BuildKit's parseMount and dispatch do. */
static void test_mounts(void)
{
	const char *df = "FROM alpine\nARG T=Cache ID=pip\n"
			 "RUN --mount=Type=$T,TARGET=/root/.cache,Id=$ID,Sharing=LOCKED,ro=t,UID=1,mode=0700 "
			 "--mount=type=secret,id=npmrc,target=/root/.npmrc,required "
			 "--mount=type=secret,source=tok,env=TOK "
			 "--mount=type=secret,target=/a/b/cred/ "
			 "--mount=type=ssh,id=gh,mode=0644 --mount=type=ssh,required=1 "
			 "--mount=type=tmpfs,target=/t,size=\"64 MiB\",rw=false "
			 "--mount=from=alpine,src=/etc,dst=e true\n";
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, NULL, &err);

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	const struct df_step *st = &p->stages[0].steps[1];
	CHECK_INT(st->n_mounts, 8);
	if (st->n_mounts != 8)
		goto out;
	const struct df_mount *m = st->mounts;
	CHECK_INT(m[0].type, DF_MOUNT_CACHE);
	CHECK_STR(m[0].target, "/root/.cache");
	CHECK_STR(m[0].id, "pip");
	CHECK_INT(m[0].sharing, DF_SHARING_LOCKED);
	CHECK(m[0].readonly);
	CHECK_INT(m[0].uid, 1);
	CHECK_INT(m[0].mode, 0700);
	CHECK_INT(m[1].type, DF_MOUNT_SECRET);
	CHECK_STR(m[1].id, "npmrc");
	CHECK(m[1].required && m[1].readonly);
	CHECK_INT(m[1].mode, 0400);
	CHECK_STR(m[2].id, "tok");
	CHECK(m[2].target == NULL && m[2].source == NULL);
	CHECK_STR(m[2].env, "TOK");
	CHECK_STR(m[3].id, "cred"); /* path.Base of the target */
	CHECK_STR(m[3].target, "/a/b/cred/");
	CHECK_INT(m[4].type, DF_MOUNT_SSH);
	CHECK_STR(m[4].id, "gh");
	CHECK_STR(m[4].target, "/run/buildkit/ssh_agent.0");
	CHECK_INT(m[4].mode, 0644);
	CHECK_STR(m[5].id, "default");
	CHECK_STR(m[5].target, "/run/buildkit/ssh_agent.1");
	CHECK(m[5].required);
	CHECK_INT(m[5].mode, 0600);
	CHECK_INT(m[6].type, DF_MOUNT_TMPFS);
	CHECK_INT((long long)m[6].size, 64ll << 20);
	CHECK(m[6].readonly);
	CHECK_INT(m[7].type, DF_MOUNT_BIND);
	CHECK_STR(m[7].from, "alpine");
	CHECK_INT(m[7].from_stage, -1);
	CHECK_STR(m[7].source, "/etc");
	CHECK_STR(m[7].target, "e");
	CHECK(m[7].readonly);
	json_t *j = df_plan_to_json(p);
	json_t *jm = json_object_get(json_array_get(json_object_get(json_array_get(json_object_get(j, "stages"), 0),
								    "steps"), 1), "mounts");
	CHECK_INT((long long)json_array_size(jm), 8);
	CHECK_STR(json_string_value(json_object_get(json_array_get(jm, 0), "mode")), "0700");
	CHECK_STR(json_string_value(json_object_get(json_array_get(jm, 0), "sharing")), "locked");
	json_decref(j);
out:
	done(p);
	/* the checks BuildKit makes after expansion, at FILE:LINE:COL */
	expect_error("FROM alpine\nARG T=cash\nRUN --mount=type=$T,target=/x true\n", NULL,
		     "Dockerfile:3:1: unsupported mount type \"cash\" (did you mean cache?)");
	expect_error("FROM alpine\nARG B=yes\nRUN --mount=type=cache,target=/x,ro=$B true\n", NULL,
		     "Dockerfile:3:1: invalid value for ro: yes");
	expect_error("FROM alpine\nARG T=secret\nRUN --mount=type=$T,target=/x,sharing=locked true\n", NULL,
		     "Dockerfile:3:1: secret mount should not define sharing");
	expect_error("FROM alpine\nARG M=9\nRUN --mount=type=cache,target=/x,mode=$M true\n", NULL,
		     "Dockerfile:3:1: invalid value 9 for mode");
	expect_error("FROM alpine\nARG S=lots\nRUN --mount=type=tmpfs,target=/x,size=$S true\n", NULL,
		     "Dockerfile:3:1: invalid value for size: lots");
	expect_error("FROM alpine\nARG T=bind\nRUN --mount=type=$T,target=/x,uid=1 true\n", NULL,
		     "Dockerfile:3:1: uid not allowed for \"bind\" type mounts");
	expect_error("FROM alpine\nRUN --mount=type=ssh,source=/x true\n", NULL, "Dockerfile:2:1: ssh does not support source");
	expect_error("FROM alpine\nARG T=secret\nRUN --mount=type=$T,source=a,id=b true\n", NULL,
		     "Dockerfile:3:1: both source and id can't be set");
}

/* One --mount vocabulary: a value written out is refused by the check
 * before expansion (at the flag, 2:5) with the words the plan uses for the
 * same value reached through an ARG (at the instruction, 3:1) — BuildKit's
 * parseMount says both. */
static void same_refusal(const char *literal, const char *args, const char *deferred, const char *want)
{
	char *df = kiln_xasprintf("FROM alpine\nRUN --mount=%s true\n", literal);
	char *where = kiln_xasprintf("Dockerfile:2:5: %s", want);
	expect_error(df, NULL, where);
	free(df);
	free(where);
	df = kiln_xasprintf("FROM alpine\nARG %s\nRUN --mount=%s true\n", args, deferred);
	where = kiln_xasprintf("Dockerfile:3:1: %s", want);
	expect_error(df, NULL, where);
	free(df);
	free(where);
}

static void test_mount_vocabulary(void)
{
	same_refusal("type=cache,target=/x,sharing=lockd", "S=lockd", "type=cache,target=/x,sharing=$S",
		     "unsupported sharing value \"lockd\" (did you mean locked?)");
	same_refusal("type=secret,id=x,sharing=locked", "T=secret", "type=$T,id=x,sharing=locked",
		     "secret mount should not define sharing");
	same_refusal("type=secret,source=a,id=b", "A=a", "type=secret,source=$A,id=b", "both source and id can't be set");
	same_refusal("type=secret,env=TOK", "T=secret", "type=$T,env=TOK",
		     "invalid secret mount. one of source, target required");
	same_refusal("type=secret,id=", "E=", "type=secret,id=$E", "invalid secret mount. one of source, target required");
	same_refusal("type=tmpfs,target=/t,size=lots", "S=lots", "type=tmpfs,target=/t,size=$S",
		     "invalid value for size: lots");
	same_refusal("target=/x,required=true", "T=bind", "type=$T,target=/x,required=true",
		     "unexpected key 'required' for mount type 'bind'");
	same_refusal("type=tmpfs,target=/t,mode=0700", "T=tmpfs", "type=$T,target=/t,mode=0700",
		     "mode not allowed for \"tmpfs\" type mounts");
	same_refusal("type=cache,target=/x,ro=yes", "B=yes", "type=cache,target=/x,ro=$B", "invalid value for ro: yes");
	/* BuildKit's key list for suggestions has every alias */
	expect_error("FROM alpine\nRUN --mount=type=cache,destinaton=/x true\n", NULL,
		     "Dockerfile:2:5: unexpected key 'destinaton' in 'destinaton=/x' (did you mean destination?)");

	/* what BuildKit takes, both passes take */
	static const char *const takes[] = {
		"ARG T=secret\nRUN --mount=type=$T,id=x,required true\n", /* the type known only after expansion */
		"RUN --mount=type=cache,target=/c,env=FOO true\n",          /* env= is read for every type */
		"RUN --mount=type=bind,destination=/d,RO true\n",
	};
	for (size_t i = 0; i < sizeof(takes) / sizeof(takes[0]); i++) {
		char *df = kiln_xasprintf("FROM alpine\n%s", takes[i]);
		kiln_error *err = NULL;
		struct df_plan *p = plan_of(df, NULL, &err);
		if (!p)
			printf("#   %s", takes[i]);
		print_err(err);
		kiln_error_free(err);
		CHECK(p != NULL);
		const struct df_stage *st = p ? &p->stages[0] : NULL;
		if (st && st->n_steps > 0 && st->steps[st->n_steps - 1].n_mounts == 1) {
			const struct df_mount *m = st->steps[st->n_steps - 1].mounts;
			if (i == 0)
				CHECK(m->type == DF_MOUNT_SECRET && m->required);
			if (i == 1)
				CHECK(m->type == DF_MOUNT_CACHE && m->env && !strcmp(m->env, "FOO"));
			if (i == 2)
				CHECK(m->target && !strcmp(m->target, "/d") && m->readonly);
		}
		done(p);
		free(df);
	}
}

static void test_errors(void)
{
	expect_error("FROM alpine\nRUN x\nENV A=\"${B:?need B}\"\n", NULL,
		     "Dockerfile:3:1: failed to process \"\"${B:?need B}\"\": B: need B");
	expect_error("FROM alpine\n\nWORKDIR /a/${}\n", NULL, "Dockerfile:3:1: failed to process \"/a/${}\": syntax error: bad substitution");
	expect_error("ARG X\nFROM ${X}\n", NULL, "Dockerfile:2:1: base name (${X}) should not be blank");
	expect_error("FROM alpine${X:?notag}\n", NULL, "Dockerfile:1:1: failed to process");
	expect_error("FROM alpine\nCOPY --from=$X a b\n", NULL, "Dockerfile:2:1: 'from' doesn't support variable expansion");
	expect_error("FROM alpine\n  LABEL a=\"unterminated\n", NULL, "Dockerfile:2:3:");
	expect_error("FROM alpine\nEXPOSE 80 ${PORT:?setPORT}\n", NULL, "PORT: setPORT");
	expect_error("FROM alpine\nVOLUME $NOTHING\n", NULL, "VOLUME specified can not be an empty string");
	expect_error("FROM --platform=$NOPE alpine\n", NULL, "failed to parse platform");
	/* image references are checked as BuildKit's ParseNormalizedNamed does */
	expect_error("ARG TAG\nFROM alpine:$TAG\n", NULL,
		     "Dockerfile:2:1: failed to parse stage name \"alpine:\": invalid reference format");
	expect_error("FROM Alpine\n", NULL, "invalid reference format: repository name must be lowercase");
	expect_error("FROM alpine\nCOPY --from=Bad/Image /a /b\n", NULL,
		     "Dockerfile:2:1: failed to parse stage name \"Bad/Image\"");
	expect_error("FROM alpine\nRUN --mount=from=x//y,target=/m true\n", NULL, "Dockerfile:2:1: failed to parse stage name");
}

static int fake_image(void *ctx, const char *ref, const char *platform, struct df_image_config *out, kiln_error **err)
{
	int *calls = ctx;

	(*calls)++;
	if (strcmp(platform, "linux/amd64") != 0)
		return kiln_err(err, KILN_E_INVALID, "unexpected platform %s", platform);
	if (strcmp(ref, "broken:1") == 0)
		return kiln_err(err, KILN_E_NOTFOUND, "manifest unknown");
	if (strcmp(ref, "onbuild:1") == 0) {
		kiln_strv_push(&out->onbuild, "COPY . /app/src");
		kiln_strv_push(&out->onbuild, "RUN make -C /app/src $TARGET");
	}
	if (strcmp(ref, "badtrigger:1") == 0)
		kiln_strv_push(&out->onbuild, "FROM x");
	if (strcmp(ref, "golang:1.22") == 0) {
		kiln_strv_push(&out->env, "PATH=/usr/local/go/bin:/usr/bin");
		kiln_strv_push(&out->env, "GOLANG_VERSION=1.22");
		out->workdir = kiln_xstrdup("/go");
		out->user = kiln_xstrdup("gopher");
	}
	return 0;
}

/* The base image's config starts the stage's env, WORKDIR and USER when the
 * caller can supply it; PATH is always there (BuildKit). */
static void test_image_config(void)
{
	const char *df = "ARG TARGETPLATFORM\n"
			 "FROM --platform=$TARGETPLATFORM golang:1.22 AS build\n"
			 "ENV PATH=/opt/bin:$PATH\n"
			 "WORKDIR src\n"
			 "RUN go version\n"
			 "FROM alpine:3.19\n"
			 "COPY --from=build /go/bin/app /app\n"
			 "RUN true\n";
	int calls = 0;
	struct df_plan_opts o = { NULL, 0, NULL, NULL, NULL, fake_image, &calls };
	kiln_error *err = NULL;
	struct df_plan *p = plan_of(df, &o, &err);

	print_err(err);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_INT(calls, 2);
	CHECK_STR(p->stages[0].platform, "linux/amd64");
	CHECK(has_env(&p->stages[0].steps[2], "PATH=/opt/bin:/usr/local/go/bin:/usr/bin"));
	CHECK(has_env(&p->stages[0].steps[2], "GOLANG_VERSION=1.22"));
	CHECK_STR(p->stages[0].steps[2].workdir, "/go/src");
	CHECK_STR(p->stages[0].steps[2].user, "gopher");
	CHECK(has_env(&p->stages[1].steps[1], "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	CHECK(p->stages[1].steps[1].workdir == NULL);
	done(p);

	/* the image's ONBUILD triggers are the stage's first steps, at FROM */
	calls = 0;
	p = plan_of("FROM alpine\nFROM onbuild:1 AS app\nARG TARGET=all\nRUN true\n", &o, &err);
	print_err(err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(calls, 1);
		CHECK_INT(p->stages[1].n_steps, 4);
		CHECK_INT(p->stages[1].steps[0].kind, DF_COPY);
		CHECK_STR(p->stages[1].steps[0].args.v[1], "/app/src");
		CHECK_INT(p->stages[1].steps[0].node->start_line, 2);
		CHECK_STR(p->stages[1].steps[1].args.v[0], "make -C /app/src $TARGET");
		CHECK_INT(p->stages[1].steps[2].kind, DF_ARG);
	}
	done(p);
	CHECK(plan_of("FROM badtrigger:1\n", &o, &err) == NULL);
	CHECK(err && strstr(kiln_error_message(err), "Dockerfile:1:1: base image badtrigger:1: from isn't allowed"));
	kiln_error_clear(&err);
	done(NULL);

	CHECK(plan_of("FROM broken:1\n", &o, &err) == NULL);
	CHECK(err && !strcmp(kiln_error_message(err), "Dockerfile:1:1: base image broken:1: manifest unknown"));
	kiln_error_clear(&err);
	done(NULL);

	/* without the hook an image sets only PATH, like scratch */
	p = plan_of("FROM scratch\nRUN a\nFROM alpine\nCOPY --from=0 / /\nENV PATH=/x:$PATH\n", NULL, &err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(p->stages[0].steps[0].env.n, 1);
		CHECK(has_env(&p->stages[0].steps[0], "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
		CHECK_INT(p->stages[1].steps[1].env.n, 1);
		CHECK(has_env(&p->stages[1].steps[1], "PATH=/x:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"));
	}
	done(p);
}

static void test_references_and_from_warnings(void)
{
	static const char *const good[] = { "alpine", "alpine:3.19", "docker.io/library/alpine:3.19",
					    "localhost:5000/a/b:t", "my-reg.io:443/team/app_x__y.z:v1.2-rc",
					    "[::1]:5000/x", "a--b", "REG.io/x",
					    "alpine@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
					    "oci:/tmp/x y/layout:base", "oci-archive:/t/a.tar:Tag", "docker-archive:/t/A.tar",
					    "docker://docker.io/library/alpine:3", NULL };
	static const char *const bad[] = { "alpine:", "Alpine", "a//b", "x@sha256:12", ":tag", "-x", "a___b",
					   "ghcr.io/Org/x", "a:b:c", "alpine:-x", "docker://Alpine", NULL };
	const char *df = "ARG A\nFROM alpine:${TAG:-3}${A}\nFROM --platform=${PLAT:-linux/arm64} ${X}busybox\n";
	kiln_error *err = NULL;
	struct df_plan *p;

	for (size_t i = 0; good[i]; i++) {
		char *why = NULL;
		if (dfp_check_reference(good[i], &why) != 0)
			printf("#   %s: %s\n", good[i], why);
		CHECK_INT(dfp_check_reference(good[i], &why), 0);
		free(why);
	}
	for (size_t i = 0; bad[i]; i++) {
		char *why = NULL;
		if (dfp_check_reference(bad[i], &why) == 0)
			printf("#   %s: accepted\n", bad[i]);
		else
			CHECK(why && strstr(why, "invalid reference format"));
		free(why);
	}
	p = plan_of(df, NULL, &err);
	print_err(err);
	CHECK(p != NULL);
	if (p) {
		CHECK_INT(p->warnings.n, 3);
		if (p->warnings.n == 3) {
			CHECK_STR(p->warnings.v[0], "Dockerfile:2:1: FROM argument 'TAG' is not declared (UndefinedArgInFrom)");
			CHECK_STR(p->warnings.v[2], "Dockerfile:3:1: FROM argument 'PLAT' is not declared (UndefinedArgInFrom)");
		}
		CHECK_STR(p->stages[0].base, "alpine:3");
		CHECK_STR(p->stages[1].platform, "linux/arm64");
	}
	done(p);
	/* the check directive: skip the rule, or make it an error */
	{
		char *skip = kiln_xasprintf("# check=skip=JSONArgsRecommended,UndefinedArgInFrom\n%s", df);
		char *error = kiln_xasprintf("# check=error=true\n%s", df);
		const struct df_kv ba[] = { { "BUILDKIT_DOCKERFILE_CHECK", "skip=all" } };
		struct df_plan_opts o = { ba, 1, NULL, NULL, NULL, NULL, NULL };

		p = plan_of(skip, NULL, &err);
		CHECK(p && p->warnings.n == 0);
		done(p);
		p = plan_of(error, NULL, &err);
		CHECK(p == NULL);
		CHECK(err && !strcmp(kiln_error_message(err), "Dockerfile:3:1: FROM argument 'TAG' is not declared "
							      "(UndefinedArgInFrom); lint violation with check=error=true"));
		kiln_error_clear(&err);
		done(NULL);
		p = plan_of(error, &o, &err);
		CHECK(p && p->warnings.n == 0);
		done(p);
		free(skip);
		free(error);
	}
}

int main(void)
{
	RUN(test_arg_scoping);
	RUN(test_build_args);
	RUN(test_platform_args);
	RUN(test_what_expands);
	RUN(test_env_sees_previous_values);
	RUN(test_heredoc_and_workdir);
	RUN(test_global_arg_without_value);
	RUN(test_mounts);
	RUN(test_mount_vocabulary);
	RUN(test_errors);
	RUN(test_image_config);
	RUN(test_references_and_from_warnings);
	return test_done();
}
