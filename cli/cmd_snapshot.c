/* cmd_snapshot.c — `kiln snapshot`: make a template from a rootfs (boot, start
 * command, ready command, snapshot into the store), list templates, verify
 * one.  The work is snapshots/; this file only parses and prints. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "builder/store.h"
#include "cli/cli.h"
#include "cli/xfer.h"
#include "snapshots/snapshots.h"

static const struct kiln_command snap_ls_cmd, snap_verify_cmd;

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
	struct snap_finalize_opts o = { 0 };
	kiln_strv env = KILN_STRV_INIT;
	kiln_error *err = NULL;
	unsigned secs = 0;
	char *digest, *image = NULL, *tmpdir = NULL;
	struct build_image *im = NULL;
	const char *network = NULL;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_STRING('t', "tag", &o.name, "NAME[:TAG]", "name the template (tag defaults to latest)"),
		CLI_STRING(0, "start", &o.start_cmd, "CMD", "start command (/bin/sh -c), left running in the snapshot"),
		CLI_STRING(0, "ready", &o.ready_cmd, "CMD", "ready command, polled until it exits 0"),
		CLI_UINT(0, "ready-timeout", &secs, "SECS", 1, 86400, "give up waiting for ready (default 60)"),
		CLI_STRING(0, "user", &o.user, "USER[:GROUP]", "run both as this user (default root)"),
		CLI_STRING(0, "workdir", &o.workdir, "DIR", "and in this directory (default /)"),
		CLI_ENV('e', "env", &env, "environment (repeatable; default PATH only)"),
		CLI_UINT('c', "cpus", &o.cpus, "N", 1, 64, "vCPUs (default 1)"),
		CLI_UINT('m', "memory", &o.memory_mib, "MIB", 1, 1 << 20, "guest memory (default 256)"),
		CLI_STRING(0, "kernel-dir", &o.kernel_dir, "DIR", "guest kernel directory (see 'kiln vm kernel')"),
		CLI_STRING(0, "network", &network, "none|outbound", "the start command's network, and the default of the\n"
			   "template's sandboxes (default none; each may ask for either)"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		goto out;
	rc = KILN_EXIT_USAGE;
	if (network && vm_net_mode_parse(network, &o.network, &err) < 0) {
		cli_usage_error(cmd, "%s", kiln_error_message(err));
		kiln_error_clear(&err);
		goto out;
	}
	o.ready_timeout_ms = (int)secs * 1000;
	if (i != argc - 1) {
		cli_usage_error(cmd, i >= argc ? "no rootfs image or image name given" : "one image, please");
		goto out;
	}
	struct stat st;
	if (stat(argv[i], &st) == 0 && S_ISREG(st.st_mode)) {
		o.rootfs = argv[i];
	} else if ((image = image_rootfs(argv[i], &o, &env, &tmpdir, &im, &err)) == NULL) {
		rc = cli_fail(err);
		goto out;
	} else {
		o.rootfs = image;
	}
	o.env = env.n ? (const char *const *)env.v : NULL;
	dist_prechunk *pc = NULL; /* chunked for kiln push beside the snapshot */
	o.on_rootfs = cli_prechunk_hook;
	o.on_rootfs_ud = &pc;
	digest = snap_finalize(&o, &err);
	cli_prechunk_end(&pc, digest);
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
	kiln_error *err = NULL;
	snap_template *t;
	int i, rc;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i != argc - 1)
		return cli_usage_error(cmd, "one template, please");
	if ((t = snap_template_open(argv[i], &err)) == NULL || snap_template_check(t, true, &err) < 0) {
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
	if (sub)
		return sub->run(sub, argc - 1, argv + 1);
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
		 "Sandboxes start from it with 'kiln sandbox create' or 'kiln run'.\n",
	.run = run,
};
