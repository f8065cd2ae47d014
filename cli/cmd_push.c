/* cmd_push.c — `kiln push`: a locally built image to any OCI registry as a
 * plain image (same manifest bytes, so the same digest anywhere), or a
 * template as a chunked artifact (cli/tmpl_xfer.c).  Progress on a terminal,
 * nothing but the digest otherwise, JSON events with --json. */
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
		fprintf(stderr, "\r\033[Kpush: %s", b.buf);
		v->drawn = true;
		kiln_buf_free(&b);
	}
}

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "parallel", required_argument, NULL, 'P' },
		{ "limit-rate", required_argument, NULL, 'L' },
		{ "chunk-size", required_argument, NULL, 'C' },
		{ "template", no_argument, NULL, 'T' },
		{ "image", no_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct view v = { .tty = isatty(STDOUT_FILENO) && isatty(STDERR_FILENO) };
	struct build_remote_opts o = { .progress = on_progress, .ud = &v };
	kiln_error *err = NULL;
	build_store *s = NULL;
	char digest[KILN_DIGEST_MAX];
	int c, kind = 0; /* 'T' template, 'I' image, 0: a template if NAME is one */

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
		case 'C':
			if (kiln_parse_size(optarg, &o.chunk_size, &err) < 0 || o.chunk_size < 4096) {
				kiln_error_free(err);
				return cli_usage_error(cmd, "--chunk-size '%s': want a size of at least 4K", optarg);
			}
			break;
		case 'T':
		case 'I':
			kind = c;
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
	if (optind >= argc || optind + 2 < argc)
		return cli_usage_error(cmd, optind >= argc ? "missing NAME" : "unexpected argument '%s'", argv[argc - 1]);
	const char *name = argv[optind], *dest = optind + 1 < argc ? argv[optind + 1] : argv[optind];
	if (optind + 1 == argc && !reg_imgref_has_host(name))
		return cli_usage_error(cmd, "where to? give [REGISTRY/]REPO[:TAG] after %s", name);
	if (kind == 'T' || (kind == 0 && cli_is_template(name))) {
		struct cli_xfer_flags f = { .json = v.json, .parallel = o.parallel };
		return cli_tmpl_push(name, dest, &f);
	}
	clock_gettime(CLOCK_MONOTONIC, &v.t0);
	int rc = build_store_open(NULL, &s, &err) < 0 ? -1 : build_image_push(s, name, dest, &o, digest, &err);
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

const struct kiln_command kiln_cmd_push = {
	.name = "push",
	.summary = "push a local template or image to a registry",
	.usage = "Usage: kiln push [--json] [--parallel N] [--limit-rate RATE] [--chunk-size SIZE]\n"
		 "                 [--template|--image] NAME[:TAG] [[REGISTRY/]REPO[:TAG]]\n\n"
		 "A template (kiln snapshot ls; --template) goes as a chunked artifact: only\n"
		 "the chunks the registry lacks are sent (docs/distribution.md); the bytes sent\n"
		 "are reported on stderr (--json: in the \"done\" event). --image pushes the\n"
		 "image of that name even when a template has it too.\n\n"
		 "Push the image NAME (see kiln images) to a registry as a plain OCI image any\n"
		 "client can pull; the destination defaults to NAME when it names a registry.\n"
		 "Blobs the registry already has are skipped; up to N (4) blobs move at once;\n"
		 "blobs larger than SIZE (32M) go up in PATCH chunks of that size; RATE\n"
		 "(e.g. 10M) caps each blob transfer, in bytes per second.\n"
		 "Plain HTTP for loopback and $KILN_INSECURE_REGISTRIES, HTTPS otherwise;\n"
		 "credentials from kiln login. Prints the manifest digest; progress on a\n"
		 "terminal; --json prints progress events and a final {\"event\":\"done\"}.\n",
	.run = run,
};
