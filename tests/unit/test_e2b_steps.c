/* test_e2b_steps.c — E2B's template step list as a Dockerfile
 * (service/e2b_steps.c): the body the npm SDK sends (e2b 2.51.0,
 * Template.toJSON) goes through kiln's own Dockerfile parser and planner and
 * each step comes out meaning what it meant (commands byte for byte, COPY
 * from the files hash's directory with E2B's owner rule, ENV values, USER
 * creating the user); hostile bodies (.. and absolute sources, flags smuggled
 * in names, newlines, NUL, huge fields, unknown step types) are 400s naming
 * the step. */
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"
#include "service/e2b.h"
#include "test.h"

#define H1 "1a73a33f36b186852224fe4c9de48287f1b39a7b48b5dcafaec3c888eab821b3"
#define H2 "b224ceb279d1069600538f32d652aeb132eb47a0c979f8508a0dfe13e5eed9b9"

/* What `Template.toJSON(t)` printed for the SDK test's template. */
static const char *sdk_body =
	"{\"startCmd\":\"sleep infinity\",\"readyCmd\":\"[ -f /tmp/ready ]\",\"steps\":["
	"{\"type\":\"COPY\",\"args\":[\"app\",\"/app/\",\"\",\"\"],\"force\":false,\"filesHash\":\"" H1 "\"},"
	"{\"type\":\"COPY\",\"args\":[\"top.txt\",\"rel/top.txt\",\"nobody\",\"0640\"],\"force\":false,"
	"\"filesHash\":\"" H2 "\"},"
	"{\"type\":\"RUN\",\"args\":[\"echo a && echo b\"],\"force\":false},"
	"{\"type\":\"RUN\",\"args\":[\"id -u > /tmp/uid\",\"root\"],\"force\":false},"
	"{\"type\":\"ENV\",\"args\":[\"GREETING\",\"hi there\",\"QUOTE\",\"a\\\"b\\\\c\"],\"force\":false},"
	"{\"type\":\"WORKDIR\",\"args\":[\"/srv\"],\"force\":false},"
	"{\"type\":\"USER\",\"args\":[\"app\"],\"force\":false},"
	"{\"type\":\"COPY\",\"args\":[\"app/*.txt\",\"txt/\",\"\",\"\"],\"force\":false,\"filesHash\":\"" H1 "\"},"
	"{\"type\":\"RUN\",\"args\":[\"apt-get update && apt-get install -y curl\",\"root\"],\"force\":false}"
	"],\"force\":false,\"fromImage\":\"127.0.0.1:5000/team/busybox:1\"}";

static json_t *load(const char *s)
{
	json_error_t je;
	json_t *j = json_loads(s, JSON_ALLOW_NUL, &je);
	if (j == NULL)
		printf("#   bad test JSON: %s\n", je.text);
	return j;
}

/* Translate, then plan the Dockerfile with kiln's parser (the plan points
 * into its AST, freed with it by plan_free). */
static struct df_ast *ast;

static void plan_free(struct df_plan *plan)
{
	if (plan)
		df_plan_free(plan);
	df_ast_free(ast);
	ast = NULL;
}

static struct df_plan *plan_of(const char *body, struct e2b_plan *p, char **df)
{
	json_t *j = load(body);
	kiln_error *err = NULL;
	struct df_plan *plan = NULL;
	struct df_plan_opts o = { 0 };

	*df = NULL;
	if (e2b_plan_parse(j, p, &err) < 0) {
		printf("#   e2b_plan_parse: %s\n", kiln_error_message(err));
		goto out;
	}
	*df = e2b_plan_dockerfile(p, "busybox:1");
	if (df_parse("Dockerfile", *df, strlen(*df), &ast, &err) < 0 || df_plan_build(ast, &o, &plan, &err) < 0) {
		printf("#   plan of:\n%s#   %s\n", *df, kiln_error_message(err));
		goto out;
	}
out:
	kiln_error_free(err);
	json_decref(j);
	return plan;
}

static const char *flag(const struct df_step *s, const char *name)
{
	for (size_t i = 0; i < s->n_flags; i++)
		if (strcmp(s->flags[i].key, name) == 0)
			return s->flags[i].value;
	return NULL;
}

static void test_sdk_body(void)
{
	struct e2b_plan p;
	char *df;
	struct df_plan *plan = plan_of(sdk_body, &p, &df);
	const struct df_stage *st;
	const struct df_step *s;

	CHECK(plan != NULL);
	if (plan == NULL)
		goto out;
	CHECK_STR(p.from_image, "127.0.0.1:5000/team/busybox:1");
	CHECK(p.from_template == NULL);
	CHECK_STR(p.start_cmd, "sleep infinity");
	CHECK_STR(p.ready_cmd, "[ -f /tmp/ready ]");
	CHECK(!p.force);
	CHECK_INT(p.steps, 9);
	CHECK_INT(p.hashes.n, 2); /* H1 twice, listed once */
	CHECK_STR(p.hashes.v[0], H1);
	CHECK_STR(p.hashes.v[1], H2);
	st = &plan->stages[0];
	CHECK_STR(st->base, "busybox:1");
	CHECK_INT(st->n_steps, 12);
	if (st->n_steps != 12)
		goto out;
	s = &st->steps[0]; /* a directory: its contents, as E2B's server moves them */
	CHECK_INT(s->kind, DF_COPY);
	CHECK_STR(s->args.v[0], H1 "/app");
	CHECK_STR(s->args.v[1], "/app/");
	CHECK(flag(s, "chown") == NULL);
	s = &st->steps[1]; /* owner and mode as given */
	CHECK_STR(s->args.v[0], H2 "/top.txt");
	CHECK_STR(s->args.v[1], "rel/top.txt");
	CHECK_STR(flag(s, "chown"), "nobody");
	CHECK_STR(flag(s, "chmod"), "0640");
	s = &st->steps[2];
	CHECK_INT(s->kind, DF_RUN);
	CHECK_STR(s->args.v[0], "echo a && echo b");
	s = &st->steps[3]; /* root is the user already: no USER around it */
	CHECK_INT(s->kind, DF_RUN);
	CHECK_STR(s->args.v[0], "id -u > /tmp/uid");
	s = &st->steps[4];
	CHECK_INT(s->kind, DF_ENV);
	CHECK_INT(s->n_kvs, 2);
	CHECK_STR(s->kvs[0].key, "GREETING");
	CHECK_STR(s->kvs[0].value, "hi there");
	CHECK_STR(s->kvs[1].value, "a\"b\\c");
	CHECK_INT(st->steps[5].kind, DF_WORKDIR);
	CHECK_STR(st->steps[5].args.v[0], "/srv");
	s = &st->steps[6]; /* USER app: made when missing, then set */
	CHECK_INT(s->kind, DF_RUN);
	CHECK(strstr(s->args.v[0], "id -u app") != NULL && strstr(s->args.v[0], "adduser -D") != NULL);
	CHECK_INT(st->steps[7].kind, DF_USER);
	CHECK_STR(st->steps[7].args.v[0], "app");
	s = &st->steps[8]; /* a glob: from the directory before it, owned by the current user */
	CHECK_INT(s->kind, DF_COPY);
	CHECK_STR(s->args.v[0], H1 "/app");
	CHECK_STR(s->args.v[1], "txt/");
	CHECK_STR(flag(s, "chown"), "app");
	CHECK_STR(s->user, "app");
	/* a RUN with its own user: USER around it, back to the current one */
	CHECK_INT(st->steps[9].kind, DF_USER);
	CHECK_STR(st->steps[9].args.v[0], "root");
	CHECK_STR(st->steps[10].args.v[0], "apt-get update && apt-get install -y curl");
	CHECK_STR(st->steps[10].user, "root");
	CHECK_INT(st->steps[11].kind, DF_USER);
	CHECK_STR(st->steps[11].args.v[0], "app");
	/* a failing Dockerfile line names its E2B step */
	CHECK_INT(e2b_plan_step_of_line(&p, 1), -1);
	CHECK_INT(e2b_plan_step_of_line(&p, st->steps[0].node->start_line), 0);
	CHECK_INT(e2b_plan_step_of_line(&p, st->steps[6].node->start_line), 6);
	CHECK_INT(e2b_plan_step_of_line(&p, st->steps[7].node->start_line), 6);
	CHECK_INT(e2b_plan_step_of_line(&p, st->steps[10].node->start_line), 8);
	CHECK_INT(e2b_plan_step_of_line(&p, st->steps[11].node->start_line), 8);
	CHECK_INT(e2b_plan_step_of_line(&p, 99), -1);
out:
	plan_free(plan);
	free(df);
	e2b_plan_free(&p);
}

/* Commands the one-line form would change reach the shell byte for byte. */
static void test_run_verbatim(void)
{
	static const char *cmds[] = {
		"echo one\necho two",
		"cat <<EOF >/x\nbody $HOME\nEOF",
		"echo trailing \\",
		"[ -f /x ] && echo json-looking",
		"printf 'E2B_EOF\\n' && echo E2B_EOF\nE2B_EOF\nE2B_EOF_1",
		"echo '#not a comment' # a comment",
		"  echo padded",
		"echo crlf\r\necho two",
		/* RUN's flags, were they first on the line */
		"--mount=type=bind,from=oci-archive:context,target=/x cat /x/y",
		"--network=host wget http://10.0.0.1/",
		"-x",
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		json_t *b = json_pack("{s:s,s:[{s:s,s:[s]}]}", "fromImage", "busybox", "steps", "type", "RUN", "args",
				      cmds[i]);
		char *body = json_dumps(b, 0), *df;
		struct e2b_plan p;
		struct df_plan *plan = plan_of(body, &p, &df);
		const char *got = NULL;

		if (plan && plan->stages[0].n_steps == 1) {
			const struct df_step *s = &plan->stages[0].steps[0];
			got = s->n_heredocs ? s->heredocs[0].content : s->args.v[0];
			if (s->n_flags || s->n_mounts) {
				printf("#   command %zu: read as RUN with %zu flags\n", i, s->n_flags);
				test_checks_failed++;
			}
		}
		{
			/* a heredoc body ends with the newline before its delimiter */
			char *want = kiln_xstrdup(cmds[i]);
			const char *g = got ? got : "";
			size_t gl = strlen(g);
			if (gl && g[gl - 1] == '\n' && want[strlen(want) - 1] != '\n')
				gl--;
			if (!got || strlen(want) != gl || strncmp(g, want, gl) != 0) {
				printf("#   command %zu: got \"%s\"\n", i, got ? got : "(none)");
				test_checks_failed++;
			}
			free(want);
		}
		plan_free(plan);
		free(df);
		free(body);
		json_decref(b);
		e2b_plan_free(&p);
	}
}

static void test_from_template_and_force(void)
{
	struct e2b_plan p;
	char *df;
	struct df_plan *plan = plan_of("{\"fromTemplate\":\"base:v1\",\"force\":false,\"steps\":["
				       "{\"type\":\"run\",\"args\":[\"true\"],\"force\":true}]}",
				       &p, &df);

	CHECK(plan != NULL);
	CHECK_STR(p.from_template, "base:v1");
	CHECK(p.force); /* a forced step forces the build: kiln has no per-step cache switch */
	CHECK_INT(p.hashes.n, 0);
	plan_free(plan);
	free(df);
	e2b_plan_free(&p);
}

/* Each bad body is a 400 (KILN_E_INVALID, or KILN_E_LIMIT) whose message holds `want`. */
static void bad(const char *body, enum kiln_errkind kind, const char *want)
{
	json_t *j = load(body);
	struct e2b_plan p;
	kiln_error *err = NULL;

	if (j == NULL) {
		test_checks_failed++;
		return;
	}
	if (e2b_plan_parse(j, &p, &err) == 0) {
		printf("#   accepted: %s\n#   as:\n%s", body, p.body.buf);
		test_checks_failed++;
		e2b_plan_free(&p);
	} else if (err->kind != kind || strstr(kiln_error_message(err), want) == NULL) {
		printf("#   %s\n#   error %d \"%s\", want %d with \"%s\"\n", body, err->kind, kiln_error_message(err),
		       kind, want);
		test_checks_failed++;
	}
	kiln_error_free(err);
	json_decref(j);
}

#define FROM "{\"fromImage\":\"busybox\",\"steps\":["
#define CP(src, dest) "{\"type\":\"COPY\",\"args\":[" src "," dest "],\"filesHash\":\"" H1 "\"}]}"

static void test_hostile(void)
{
	bad("[]", KILN_E_INVALID, "want a JSON object");
	bad("{\"steps\":[]}", KILN_E_INVALID, "exactly one of fromImage and fromTemplate");
	bad("{\"fromImage\":\"a\",\"fromTemplate\":\"b\"}", KILN_E_INVALID, "exactly one");
	bad("{\"fromImage\":\"Bad Name\"}", KILN_E_INVALID, "fromImage");
	bad("{\"fromImage\":\"busybox\\nRUN evil\"}", KILN_E_INVALID, "fromImage");
	bad("{\"fromTemplate\":\"127.0.0.1:5000/x\"}", KILN_E_INVALID, "no host");
	bad("{\"fromImage\":\"busybox\",\"fromImageRegistry\":{\"type\":\"registry\",\"username\":\"u\","
	    "\"password\":\"p\"}}",
	    KILN_E_INVALID, "fromImageRegistry");
	bad("{\"fromImage\":\"busybox\",\"steps\":{}}", KILN_E_INVALID, "steps: want an array");
	bad("{\"fromImage\":\"busybox\",\"force\":\"yes\"}", KILN_E_INVALID, "force");
	bad(FROM "{\"type\":\"ADD\",\"args\":[\"a\",\"b\"]}]}", KILN_E_INVALID,
	    "steps[0]: unknown step type \"ADD\"");
	bad(FROM "{\"type\":\"RUN\",\"args\":[\"true\"]},{\"type\":\"FROM\",\"args\":[\"x\"]}]}", KILN_E_INVALID,
	    "steps[1]: unknown step type");
	bad(FROM "{\"args\":[\"x\"]}]}", KILN_E_INVALID, "steps[0]: type: want a string");
	bad(FROM "\"RUN x\"]}", KILN_E_INVALID, "steps[0]: want an object");
	bad(FROM "{\"type\":\"RUN\",\"args\":\"true\"}]}", KILN_E_INVALID, "args: want an array");
	bad(FROM "{\"type\":\"RUN\",\"args\":[1]}]}", KILN_E_INVALID, "steps[0] (RUN): args[0]: want a string");
	bad(FROM "{\"type\":\"RUN\",\"args\":[]}]}", KILN_E_INVALID, "want 1 to 2 arguments, got 0");
	bad(FROM "{\"type\":\"RUN\",\"args\":[\" \\n \"]}]}", KILN_E_INVALID, "empty command");
	bad(FROM "{\"type\":\"RUN\",\"args\":[\"a\\u0000b\"]}]}", KILN_E_INVALID, "NUL");
	bad(FROM "{\"type\":\"RUN\",\"args\":[\"true\",\"root --privileged\"]}]}", KILN_E_INVALID, "user");
	/* COPY: sources never leave the context, nothing smuggled into flags */
	bad(FROM CP("\"../etc/passwd\"", "\"/x\""), KILN_E_INVALID, "leaves the context");
	bad(FROM CP("\"a/../../x\"", "\"/x\""), KILN_E_INVALID, "leaves the context");
	bad(FROM CP("\"/etc/passwd\"", "\"/x\""), KILN_E_INVALID, "leaves the context");
	bad(FROM CP("\"..\"", "\"/x\""), KILN_E_INVALID, "leaves the context");
	bad(FROM CP("\"a\\nRUN evil\"", "\"/x\""), KILN_E_INVALID, "control character");
	bad(FROM CP("\"a\"", "\"/x\\nRUN evil\""), KILN_E_INVALID, "destination");
	bad(FROM CP("\"\"", "\"/x\""), KILN_E_INVALID, "source path: empty");
	bad(FROM "{\"type\":\"COPY\",\"args\":[\"a\",\"/x\"]}]}", KILN_E_INVALID, "filesHash");
	bad(FROM "{\"type\":\"COPY\",\"args\":[\"a\",\"/x\"],\"filesHash\":\"../../x\"}]}", KILN_E_INVALID,
	    "filesHash");
	bad(FROM "{\"type\":\"COPY\",\"args\":[\"a\",\"/x\",\"u --from=evil\"],\"filesHash\":\"" H1 "\"}]}",
	    KILN_E_INVALID, "owner");
	bad(FROM "{\"type\":\"COPY\",\"args\":[\"a\",\"/x\",\"\",\"0999\"],\"filesHash\":\"" H1 "\"}]}",
	    KILN_E_INVALID, "mode");
	bad(FROM "{\"type\":\"COPY\",\"args\":[\"a\"],\"filesHash\":\"" H1 "\"}]}", KILN_E_INVALID,
	    "want 2 to 4 arguments");
	/* ENV, WORKDIR, USER */
	bad(FROM "{\"type\":\"ENV\",\"args\":[\"K\"]}]}", KILN_E_INVALID, "want 2 to");
	bad(FROM "{\"type\":\"ENV\",\"args\":[\"K\",\"v\",\"L\"]}]}", KILN_E_INVALID, "key/value pairs");
	bad(FROM "{\"type\":\"ENV\",\"args\":[\"A=B\",\"v\"]}]}", KILN_E_INVALID, "key \"A=B\"");
	bad(FROM "{\"type\":\"ENV\",\"args\":[\"K\",\"line\\nRUN evil\"]}]}", KILN_E_INVALID, "newline");
	bad(FROM "{\"type\":\"WORKDIR\",\"args\":[\"\"]}]}", KILN_E_INVALID, "path: empty");
	bad(FROM "{\"type\":\"WORKDIR\",\"args\":[\"/a\\nRUN evil\"]}]}", KILN_E_INVALID, "control");
	bad(FROM "{\"type\":\"USER\",\"args\":[\"a b\"]}]}", KILN_E_INVALID, "user \"a b\"");
	bad(FROM "{\"type\":\"USER\",\"args\":[\"-oops\"]}]}", KILN_E_INVALID, "user");
	bad(FROM "{\"type\":\"USER\",\"args\":[\"app\",\"maybe\"]}]}", KILN_E_INVALID, "args[1]");
	bad(FROM "{\"type\":\"USER\",\"args\":[\"app\"],\"force\":1}]}", KILN_E_INVALID, "force");
	{
		/* huge fields: an argument over the bound, too many steps */
		kiln_buf b = KILN_BUF_INIT;
		char *big = kiln_xmalloc(E2B_MAX_ARG + 2);
		memset(big, 'x', E2B_MAX_ARG + 1);
		big[E2B_MAX_ARG + 1] = '\0';
		kiln_buf_addf(&b, FROM "{\"type\":\"RUN\",\"args\":[\"%s\"]}]}", big);
		bad(b.buf, KILN_E_LIMIT, "steps[0] (RUN): args[0]: 262145 bytes");
		kiln_buf_reset(&b);
		kiln_buf_addf(&b, "{\"fromImage\":\"busybox\",\"startCmd\":\"%s\"}", big);
		bad(b.buf, KILN_E_LIMIT, "startCmd");
		kiln_buf_reset(&b);
		kiln_buf_adds(&b, FROM);
		for (int i = 0; i <= E2B_MAX_STEPS; i++)
			kiln_buf_addf(&b, "%s{\"type\":\"RUN\",\"args\":[\"true\"]}", i ? "," : "");
		kiln_buf_adds(&b, "]}");
		bad(b.buf, KILN_E_LIMIT, "steps: 513 of them");
		/* many big steps: the Dockerfile bound */
		kiln_buf_reset(&b);
		kiln_buf_adds(&b, FROM);
		big[E2B_MAX_ARG - 1] = '\0';
		for (int i = 0; i < 20; i++)
			kiln_buf_addf(&b, "%s{\"type\":\"RUN\",\"args\":[\"%s\"]}", i ? "," : "", big);
		kiln_buf_adds(&b, "]}");
		bad(b.buf, KILN_E_LIMIT, "over 4194304 bytes");
		free(big);
		kiln_buf_free(&b);
	}
}

static void test_hash_valid(void)
{
	CHECK(e2b_hash_valid(H1));
	CHECK(!e2b_hash_valid(NULL));
	CHECK(!e2b_hash_valid(""));
	CHECK(!e2b_hash_valid("1A73a33f36b186852224fe4c9de48287f1b39a7b48b5dcafaec3c888eab821b3"));
	CHECK(!e2b_hash_valid(H1 "0"));
	CHECK(!e2b_hash_valid("sha256:" H1));
}

int main(void)
{
	RUN(test_sdk_body);
	RUN(test_run_verbatim);
	RUN(test_from_template_and_force);
	RUN(test_hostile);
	RUN(test_hash_valid);
	return test_done();
}
