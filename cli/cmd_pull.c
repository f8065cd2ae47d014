/* cmd_pull.c — `kiln pull`: an image from any OCI registry into the local
 * store (`kiln images` lists it, FROM uses it), pinned by digest, or a
 * template artifact into the chunk and template stores (cli/tmpl_xfer.c).
 * Progress on a terminal, nothing but the digest otherwise, JSON events with --json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "builder/builder.h"
#include "cli/cli.h"
#include "cli/tmpl_xfer.h"
#include "registry/registry.h"

struct view {
	bool json, tty;
	struct timespec t0;
	bool drawn;
};

static double elapsed(const struct view *v)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - v->t0.tv_sec) + (double)(t.tv_nsec - v->t0.tv_nsec) / 1e9;
}

static void on_progress(void *ud, const struct reg_progress *p)
{
	struct view *v = ud;
	if (v->json) {
		json_t *j = reg_progress_json(p, elapsed(v));
		json_object_set_new(j, "event", json_string(p->digest ? "blob" : "progress"));
		char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
		printf("%s\n", s);
		fflush(stdout);
		free(s);
		json_decref(j);
	} else if (v->tty) {
		kiln_buf b = KILN_BUF_INIT;
		reg_progress_format(p, elapsed(v), &b);
		fprintf(stderr, "\r\033[Kpull: %s", b.buf);
		v->drawn = true;
		kiln_buf_free(&b);
	}
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "parallel", required_argument, NULL, 'P' },
		{ "name", required_argument, NULL, 'N' },
		{ "limit-rate", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct view v = { .tty = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) };
	struct build_remote_opts o = { .progress = on_progress, .ud = &v };
	kiln_error *err = NULL;
	build_store *s = NULL;
	char digest[KILN_DIGEST_MAX];
	const char *name = NULL;
	int c;

	while ((c = cli_getopt(cmd, argc, argv, "h", opts)) != -1) {
		switch (c) {
		case 'j':
			v.json = true;
			break;
		case 'P': {
			char *end;
			long n = strtol(optarg, &end, 10);
			if (*end || n < 1 || n > 64)
				return cli_usage_error(cmd, "--parallel '%s': want 1 to 64", optarg);
			o.parallel = (unsigned)n;
			break;
		}
		case 'N':
			name = optarg;
			break;
		case 'L':
			if (kiln_parse_size(optarg, &o.max_rate, &err) < 0 || o.max_rate == 0) {
				kiln_error_free(err);
				return cli_usage_error(cmd, "--limit-rate '%s': want bytes per second (e.g. 10M)", optarg);
			}
			break;
		case 'h':
			return KILN_EXIT_OK;
		default:
			return KILN_EXIT_USAGE;
		}
	}
	if (optind + 1 != argc)
		return cli_usage_error(cmd, optind >= argc ? "missing REFERENCE" : "unexpected argument '%s'",
				       argv[argc - 1]);
	const char *dest = argv[optind];
	struct cli_xfer_flags f = { .json = v.json, .parallel = o.parallel, .name = name };
	int trc = cli_tmpl_pull(dest, &f);
	if (trc >= 0)
		return trc;
	if (name)
		return cli_usage_error(cmd, "--name is for templates; %s is not one", dest);
	clock_gettime(CLOCK_MONOTONIC, &v.t0);
	int rc = build_store_open(NULL, &s, &err) < 0 ? -1 : build_image_pull(s, dest, &o, digest, &err);
	if (v.drawn)
		fputc('\n', stderr);
	build_store_close(s);
	if (rc < 0)
		return cli_fail(err);
	if (v.json) {
		json_t *j = json_pack("{s:s,s:s,s:s,s:f}", "event", "done", "digest", digest, "ref", dest, "seconds",
				      elapsed(&v));
		char *t = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(6));
		printf("%s\n", t);
		free(t);
		json_decref(j);
	} else {
		printf("%s\n", digest);
	}
	if (fflush(stdout) != 0) {
		kiln_err_errno(&err, errno, "write output");
		return cli_fail(err);
	}
	return KILN_EXIT_OK;
}

const struct kiln_command kiln_cmd_pull = {
	.name = "pull",
	.summary = "pull a template or an image from a registry",
	.usage = "Usage: kiln pull [--json] [--parallel N] [--limit-rate RATE] [--name NAME[:TAG]]\n"
		 "                 [REGISTRY/]REPO[:TAG|@DIGEST]\n\n"
		 "A template artifact (kiln push of a template) becomes the local template\n"
		 "REPO:TAG (or --name): only the chunks this host's chunk store lacks are\n"
		 "fetched, each verified; the template appears only once all of it is there and\n"
		 "checked (docs/distribution.md). The bytes received are reported on stderr.\n\n"
		 "Pull a plain OCI or Docker image (an index: its linux/amd64 image) into the\n"
		 "local store under that name, so kiln images lists it and FROM uses it.\n"
		 "Blobs already stored are not fetched; an interrupted pull resumes; every\n"
		 "blob is checked against its digest before it is stored; RATE (e.g. 10M) caps\n"
		 "each blob transfer, in bytes per second. No registry host:\n"
		 "Docker Hub. Prints the image manifest digest; progress on a terminal;\n"
		 "--json prints progress events and a final {\"event\":\"done\"}.\n",
	.run = run,
};
