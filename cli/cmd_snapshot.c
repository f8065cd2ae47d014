/* cmd_snapshot.c — `kiln snapshot`: make a template from a rootfs (boot, start
 * command, ready command, snapshot into the store), list templates, verify
 * one.  The work is snapshots/; this file only parses and prints. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "builder/builder.h"
#include "cli/cli.h"
#include "snapshots/snapshots.h"

static const struct kiln_command snap_ls_cmd, snap_verify_cmd;

static int parse_uint(const struct kiln_command *cmd, const char *opt, const char *s, unsigned max, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v == 0 || v > max)
		return cli_usage_error(cmd, "%s wants a number from 1 to %u, not '%s'", opt, max, s);
	*out = (unsigned)v;
	return 0;
}

/* An image of the local store as the template's source: its merged
 * filesystem written to an ext4 file in *tmpdir, its USER, WORKDIR and ENV
 * taken unless given on the command line, its name as the template's. */
static char *image_rootfs(const char *ref, struct snap_finalize_opts *o, kiln_strv *env, char **tmpdir,
			  struct build_image **imp, kiln_error **err)
{
	build_store *s = NULL;
	struct build_image *im = NULL;
	char *out = NULL;

	if (build_store_open(NULL, &s, err) < 0 || build_store_lock(s, false, err) < 0 ||
	    build_image_load(s, ref, &im, err) < 0)
		goto fail;
	if ((*tmpdir = kiln_mkdtemp("kiln-snapshot", err)) == NULL)
		goto fail;
	out = kiln_path_join(*tmpdir, "rootfs.ext4");
	if (build_rootfs_write(s, im->manifest_digest, out, err) < 0)
		goto fail;
	const json_t *cfg = json_object_get(im->config, "config");
	const char *user = kiln_json_str(cfg, "User"), *wd = kiln_json_str(cfg, "WorkingDir");
	if (o->user == NULL && user && *user)
		o->user = user; /* borrowed from im, kept by the caller */
	if (o->workdir == NULL && wd && *wd)
		o->workdir = wd;
	if (env->n == 0) {
		const json_t *e = json_object_get(cfg, "Env");
		for (size_t i = 0; json_is_array(e) && i < json_array_size(e); i++)
			if (json_is_string(json_array_get(e, i)))
				kiln_strv_push(env, json_string_value(json_array_get(e, i)));
	}
	if (o->name == NULL)
		o->name = ref;
	*imp = im;
	build_store_close(s);
	return out;
fail:
	kiln_error_wrap(err, "image %s", ref);
	build_image_free(im);
	build_store_close(s);
	free(out);
	return NULL;
}

static int run_make(const struct kiln_command *cmd, int argc, char **argv)
{
	enum { O_START = 256, O_READY, O_USER, O_WORKDIR, O_TIMEOUT, O_KERNEL };
	static const struct option opts[] = { { "help", no_argument, NULL, 'h' },
					      { "tag", required_argument, NULL, 't' },
					      { "cpus", required_argument, NULL, 'c' },
					      { "memory", required_argument, NULL, 'm' },
					      { "env", required_argument, NULL, 'e' },
					      { "start", required_argument, NULL, O_START },
					      { "ready", required_argument, NULL, O_READY },
					      { "user", required_argument, NULL, O_USER },
					      { "workdir", required_argument, NULL, O_WORKDIR },
					      { "ready-timeout", required_argument, NULL, O_TIMEOUT },
					      { "kernel-dir", required_argument, NULL, O_KERNEL },
					      { NULL, 0, NULL, 0 } };
	struct snap_finalize_opts o = { 0 };
	kiln_strv env = KILN_STRV_INIT;
	kiln_error *err = NULL;
	unsigned secs = 0;
	char *digest, *image = NULL, *tmpdir = NULL;
	struct build_image *im = NULL;
	int c, rc = KILN_EXIT_USAGE;

	while ((c = cli_getopt(cmd, argc, argv, "ht:c:m:e:", opts)) != -1) {
		switch (c) {
		case 't': o.name = optarg; break;
		case 'c':
			if (parse_uint(cmd, "--cpus", optarg, 64, &o.cpus))
				goto out;
			break;
		case 'm':
			if (parse_uint(cmd, "--memory", optarg, 1024 * 1024, &o.memory_mib))
				goto out;
			break;
		case 'e':
			if (strchr(optarg, '=') == NULL || optarg[0] == '=') {
				cli_usage_error(cmd, "--env wants NAME=VALUE, not '%s'", optarg);
				goto out;
			}
			kiln_strv_push(&env, optarg);
			break;
		case O_START: o.start_cmd = optarg; break;
		case O_READY: o.ready_cmd = optarg; break;
		case O_USER: o.user = optarg; break;
		case O_WORKDIR: o.workdir = optarg; break;
		case O_TIMEOUT:
			if (parse_uint(cmd, "--ready-timeout", optarg, 86400, &secs))
				goto out;
			o.ready_timeout_ms = (int)secs * 1000;
			break;
		case O_KERNEL: o.kernel_dir = optarg; break;
		case 'h': rc = KILN_EXIT_OK; goto out;
		default: goto out;
		}
	}
	if (optind != argc - 1) {
		cli_usage_error(cmd, optind >= argc ? "no rootfs image or image name given" : "one image, please");
		goto out;
	}
	struct stat st;
	if (stat(argv[optind], &st) == 0 && S_ISREG(st.st_mode)) {
		o.rootfs = argv[optind];
	} else if ((image = image_rootfs(argv[optind], &o, &env, &tmpdir, &im, &err)) == NULL) {
		rc = cli_fail(err);
		goto out;
	} else {
		o.rootfs = image;
	}
	o.env = env.n ? (const char *const *)env.v : NULL;
	digest = snap_finalize(&o, &err);
	if (digest == NULL) {
		rc = cli_fail(err);
		goto out;
	}
	printf("%s\n", digest);
	free(digest);
	rc = KILN_EXIT_OK;
out:
	if (tmpdir) {
		kiln_error *e = NULL;
		if (kiln_rm_rf(tmpdir, &e) < 0)
			kiln_error_free(e);
	}
	free(tmpdir);
	free(image);
	build_image_free(im);
	kiln_strv_free(&env);
	return rc;
}

static int run_ls(const struct kiln_command *cmd, int argc, char **argv)
{
	kiln_error *err = NULL;
	bool json;
	json_t *list;
	int c;

	if ((c = cli_list_opts(cmd, argc, argv, &json)) >= 0)
		return c;
	if ((list = snap_template_list(&err)) == NULL)
		return cli_fail(err);
	if (json) {
		cli_print_json(list);
	} else {
		printf("%-30s %-19s %-20s %s\n", "NAME", "DIGEST", "CREATED", "MEMORY STORED");
		for (size_t i = 0; i < json_array_size(list); i++) {
			const json_t *it = json_array_get(list, i);
			const char *d = kiln_json_str(it, "digest");
			printf("%-30s %-19.19s %-20s %.1f MiB\n", kiln_json_str(it, "name"), d ? d : "(broken)",
			       kiln_json_str(it, "created") ? kiln_json_str(it, "created") : "-",
			       (double)kiln_json_int(it, "memory_stored_bytes", 0) / 1048576.0);
		}
	}
	json_decref(list);
	return KILN_EXIT_OK;
}

static int run_verify(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct option opts[] = { { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	kiln_error *err = NULL;
	snap_template *t;
	int c;

	while ((c = cli_getopt(cmd, argc, argv, "h", opts)) != -1)
		return c == 'h' ? KILN_EXIT_OK : KILN_EXIT_USAGE;
	if (optind != argc - 1)
		return cli_usage_error(cmd, "one template, please");
	if ((t = snap_template_open(argv[optind], &err)) == NULL || snap_template_check(t, true, &err) < 0) {
		snap_template_free(t);
		return cli_fail(err);
	}
	printf("%s ok\n", snap_template_digest(t));
	snap_template_free(t);
	return KILN_EXIT_OK;
}

static const struct kiln_command snap_ls_cmd = {
	.name = "ls",
	.summary = "list templates",
	.usage = "Usage: kiln snapshot ls [--json]\n\nList the tagged templates in the local store.\n",
	.run = run_ls,
};
static const struct kiln_command snap_verify_cmd = {
	.name = "verify",
	.summary = "check a template's blobs and dependencies",
	.usage = "Usage: kiln snapshot verify TEMPLATE\n\n"
		 "Hash every blob of TEMPLATE (NAME[:TAG] or digest) and check that this host can\n"
		 "restore it (QEMU, machine, agent protocol, accelerator, TSC rate).\n",
	.run = run_verify,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct kiln_command *const subs[] = { &snap_ls_cmd, &snap_verify_cmd, NULL };
	const struct kiln_command *sub = argc >= 2 ? cli_find(subs, argv[1]) : NULL;

	if (argc == 2 && strcmp(argv[1], "--list-commands") == 0)
		return cli_list_commands(subs);
	if (sub) {
		optind = 1;
		return sub->run(sub, argc - 1, argv + 1);
	}
	return run_make(cmd, argc, argv);
}

const struct kiln_command kiln_cmd_snapshot = {
	.name = "snapshot",
	.summary = "make a template: boot a rootfs, start it, snapshot it when ready",
	.usage = "Usage: kiln snapshot [OPTIONS] ROOTFS.ext4|IMAGE[:TAG]\n"
		 "       kiln snapshot ls [--json]\n"
		 "       kiln snapshot verify TEMPLATE\n\n"
		 "Boot ROOTFS (or the filesystem of IMAGE from the local store, with its USER,\n"
		 "WORKDIR and ENV, tagged with its name) in a microVM, run the start command in\n"
		 "the background, poll the\n"
		 "ready command until it exits 0, then snapshot memory, device state and disk into\n"
		 "the template store ($KILN_HOME/snapshots) and print the template's digest.\n"
		 "Sandboxes start from it with 'kiln sandbox create' or 'kiln run'.\n\n"
		 "Options:\n"
		 "  -t, --tag NAME[:TAG]   name the template (tag defaults to latest)\n"
		 "  --start CMD            start command (/bin/sh -c), left running in the snapshot\n"
		 "  --ready CMD            ready command, polled until it exits 0\n"
		 "  --ready-timeout SECS   give up waiting for ready (default 60)\n"
		 "  --user USER[:GROUP]    run both as this user (default root)\n"
		 "  --workdir DIR          and in this directory (default /)\n"
		 "  -e, --env NAME=VALUE   environment (repeatable; default PATH only)\n"
		 "  -c, --cpus N           vCPUs (default 1)\n"
		 "  -m, --memory MIB       guest memory (default 256)\n"
		 "  --kernel-dir DIR       guest kernel directory (see 'kiln vm kernel')\n",
	.run = run,
};
