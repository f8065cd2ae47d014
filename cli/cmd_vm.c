/* cmd_vm.c — `kiln vm`: debugging commands for the microVM layer.
 *   kiln vm kernel [--fetch] [--dir DIR]      show (or fetch) the guest kernel
 *   kiln vm boot [OPTIONS] ROOTFS [-- CMD...] boot a rootfs, optionally run CMD
 * (`kiln vm run` is the same as `kiln vm boot`). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "guest/guest.h"
#include "vm/vm.h"

static const struct kiln_command vm_kernel_cmd, vm_boot_cmd, vm_run_cmd;

/* $KILN_FETCH_KERNEL, else fetch-kernel.sh of kiln's installation
 * (PREFIX/lib/kiln) or checkout (vm/). */
static char *fetch_script(void)
{
	const char *env = getenv("KILN_FETCH_KERNEL");

	if (env && *env)
		return kiln_xstrdup(env);
	return vm_own_file("fetch-kernel.sh", "vm/fetch-kernel.sh");
}

static int run_kernel(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *dir_opt = NULL;
	struct vm_kernel k;
	kiln_error *err = NULL;
	bool fetch = false;
	char *dir;
	int i, rc;
	const struct cli_option opts[] = {
		CLI_BOOL('f', "fetch", &fetch, "put a kernel into DIR first (default $KILN_KERNEL, else\n"
					       "$KILN_HOME/kernel) with fetch-kernel.sh: by default a minimal\n"
					       "kernel built from Debian's linux-source (build-kernel.sh);\n"
					       "with KILN_GUEST_KERNEL=cloud Debian's linux-image-cloud-amd64\n"
					       "(apt-get download + dpkg-deb -x; nothing installed)"),
		CLI_STRING('d', "dir", &dir_opt, "DIR", "show (or fetch into) DIR instead"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
	/* --fetch writes where the user's overrides point; showing follows the search path. */
	dir = dir_opt ? kiln_xstrdup(dir_opt) : fetch ? vm_kernel_user_dir() : NULL;
	if (fetch) {
		char *script = fetch_script();
		pid_t pid;
		int status = 0;
		if (script == NULL || access(script, X_OK) < 0) {
			kiln_err(&err, KILN_E_NOTFOUND, "cannot find fetch-kernel.sh in PREFIX/lib/kiln or the checkout's vm/ (set KILN_FETCH_KERNEL)");
			free(script);
			free(dir);
			return cli_fail(err);
		}
		fflush(NULL);
		pid = fork();
		if (pid == 0) {
			execl(script, script, dir, (char *)NULL);
			_exit(127);
		}
		if (pid > 0)
			kiln_waitpid(pid, &status, 0);
		if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			kiln_err(&err, KILN_E_GENERIC, "%s %s failed", script, dir);
			free(script);
			free(dir);
			return cli_fail(err);
		}
		free(script);
	}
	if (vm_kernel_open(dir, &k, &err) < 0) {
		free(dir);
		return cli_fail(err);
	}
	printf("release  %s\nkernel   %s\nboots    %s\nmodules  %s\ndir      %s\n", k.release, k.vmlinuz, k.image,
	       k.modules, k.dir);
	vm_kernel_free(&k);
	free(dir);
	return KILN_EXIT_OK;
}

static void write_fd(int fd, const void *data, size_t len)
{
	/* our reader went away: the output is dropped, the command runs on */
	(void)kiln_write_full(fd, data, len);
}

static void on_stdout(void *user, const void *data, size_t len) { (void)user; write_fd(1, data, len); }
static void on_stderr(void *user, const void *data, size_t len) { (void)user; write_fd(2, data, len); }

struct exec_args {
	char **argv;
	kiln_strv env;
	const char *cwd;
	const char *user;     /* "name|uid[:group|gid]" resolved in the guest */
	unsigned timeout_s;
};

/* Run the command in the guest, output to ours; returns the exit code kiln
 * exits with (128+N for a signal, like a shell). */
static int exec_in_guest(vm_instance *v, const struct exec_args *a, kiln_error **err)
{
	struct guest_exec_opts o;
	struct guest_result res;

	guest_exec_opts_init(&o);
	o.argv = (const char *const *)a->argv;
	o.env = a->env.n ? (const char *const *)a->env.v : NULL;
	o.cwd = a->cwd;
	o.run_as = a->user;
	o.timeout_ms = (uint64_t)a->timeout_s * 1000;
	o.on_stdout = on_stdout;
	o.on_stderr = on_stderr;
	if (guest_exec(vm_agent(v), &o, NULL, 0, -1, &res, err) < 0)
		return -1;
	if (res.timed_out)
		fprintf(stderr, "kiln: the command timed out after %u s and was killed\n", a->timeout_s);
	return res.signal ? 128 + res.signal : res.exit_code;
}

/* ROOTFS [-- CMD...] after the options (at i). */
static int boot_operands(const struct kiln_command *cmd, int argc, char **argv, int i, struct vm_config *cfg,
			 struct exec_args *ea)
{
	if (i >= argc)
		return cli_usage_error(cmd, "no rootfs image given");
	cfg->rootfs = argv[i++];
	if (i < argc && strcmp(argv[i], "--") != 0)
		return cli_usage_error(cmd, "unexpected argument '%s' (put the command after --)", argv[i]);
	if (i < argc)
		i++;
	if (i < argc) {
		ea->argv = argv + i;
		if (cfg->no_agent)
			return cli_usage_error(cmd, "a command needs the agent: drop --no-agent");
	}
	return KILN_EXIT_OK;
}

/* How the boot went, on stderr; with a command, kiln's stdout and stderr
 * are the command's alone (unless KILN_LOG asks for more). */
static void report_boot(vm_instance *v, bool command)
{
	if (command && kiln_log_level() < KILN_LOG_INFO)
		return;
	fprintf(stderr, "kiln: VM booted in %.0f ms%s (%s%s), console %s\n", vm_boot_ms(v),
		vm_has_agent(v) ? "" : "", vm_accel_used(v) == VM_ACCEL_KVM ? "kvm" : "tcg",
		vm_has_agent(v) ? ", agent" : "", vm_console_path(v));
	if (vm_has_agent(v))
		fprintf(stderr, "kiln: agent ready %.0f ms after QEMU started\n", vm_agent_ms(v));
}

static void print_console(vm_instance *v)
{
	char *log = NULL;
	size_t len = 0;
	kiln_error *e2 = NULL;

	if (kiln_read_file(vm_console_path(v), &log, &len, 0, &e2) == 0)
		fwrite(log, 1, len, stderr);
	free(log);
	kiln_error_free(e2);
}

static int run_boot(const struct kiln_command *cmd, int argc, char **argv)
{
	struct vm_config cfg;
	struct exec_args ea = { .env = KILN_STRV_INIT };
	kiln_error *err = NULL;
	vm_instance *v;
	bool show_console = false, wait = false, writable = false, tcg = false;
	unsigned timeout_s = 0;
	int i, rc = KILN_EXIT_OK;

	vm_config_init(&cfg);
	const struct cli_option opts[] = {
		CLI_UINT('c', "cpus", &cfg.cpus, "N", 1, 1 << 20, "vCPUs (default 1)"),
		CLI_UINT('m', "memory", &cfg.memory_mib, "MIB", 1, 1 << 20, "guest memory in MiB (default 256)"),
		CLI_BOOL(0, "net", &cfg.net, "user-mode network (off by default)"),
		CLI_BOOL(0, "writable", &writable, "mount the disk read-write (default: read-only under an overlay)"),
		CLI_UINT(0, "scratch", &cfg.scratch_mib, "MIB", 1, 1 << 20,
			 "keep the overlay's changes on a sparse ext4 disk of MIB, not in RAM"),
		CLI_BOOL(0, "no-agent", &cfg.no_agent, "boot without the guest agent"),
		CLI_UINT(0, "timeout", &timeout_s, "SECONDS", 1, 1 << 20,
			 "give up when init is not ready by then (default 120 TCG, 30 KVM)"),
		CLI_BOOL(0, "tcg", &tcg, "use TCG even when KVM is available"),
		CLI_STRING(0, "kernel-dir", &cfg.kernel_dir, "DIR", "guest kernel directory (see 'kiln vm kernel')"),
		CLI_STRING(0, "append", &cfg.extra_cmdline, "ARGS", "add ARGS to the guest kernel's command line"),
		CLI_BOOL(0, "wait", &wait, "keep the VM until the guest powers off or kiln is interrupted;\n"
					   "its agent socket is then free for 'kiln agent --socket'"),
		CLI_BOOL(0, "console", &show_console, "print the serial console log to stderr at the end"),
		CLI_BOOL(0, "verbose-console", &cfg.console_verbose, "boot without 'quiet' (kernel messages on the console)"),
		CLI_ENV('e', "env", &ea.env, "for CMD: environment (repeatable; default: PATH only)"),
		CLI_STRING('w', "workdir", &ea.cwd, "DIR", "for CMD: working directory in the guest (default /)"),
		CLI_STRING('u', "user", &ea.user, "USER", "for CMD: user[:group] or uid[:gid] in the guest (default root)"),
		CLI_UINT(0, "cmd-timeout", &ea.timeout_s, "SECS", 1, 1 << 20, "kill CMD after SECS seconds"),
		CLI_END,
	};

	if ((i = cli_parse(cmd, opts, argc, argv, 0, &rc)) < 0) {
		kiln_strv_free(&ea.env);
		return rc;
	}
	if (writable)
		cfg.root_mode = VM_ROOT_WRITABLE;
	if (tcg)
		cfg.accel = VM_ACCEL_TCG;
	if (timeout_s)
		cfg.boot_timeout_ms = (int)(timeout_s > 3600 ? 3600000 : timeout_s * 1000);
	if ((rc = boot_operands(cmd, argc, argv, i, &cfg, &ea)) != KILN_EXIT_OK) {
		kiln_strv_free(&ea.env);
		return rc;
	}

	vm_cleanup_on_signals();
	v = vm_boot(&cfg, &err);
	if (v == NULL) {
		kiln_strv_free(&ea.env);
		return cli_fail(err);
	}
	if (ea.argv && !vm_has_agent(v)) {
		kiln_err(&err, KILN_E_NOTFOUND, "a command needs the guest agent: install kiln-agent in PREFIX/lib/kiln, build bin/kiln-agent, or set KILN_AGENT");
		goto out;
	}
	report_boot(v, ea.argv != NULL);
	if (ea.argv) {
		rc = exec_in_guest(v, &ea, &err);
		if (rc < 0)
			kiln_error_wrap(&err, "running %s in the guest", ea.argv[0]);
	} else if (wait) {
		if (vm_has_agent(v)) {
			/* Let `kiln agent --socket` in: the chardev takes one client. */
			vm_agent_release(v);
			fprintf(stderr, "kiln: agent socket %s\n", vm_agent_socket(v));
		}
		vm_wait_exit(v, -1, &err);
	}
out:
	if (show_console)
		print_console(v);
	vm_destroy(v);
	kiln_strv_free(&ea.env);
	if (err)
		return cli_fail(err);
	return rc;
}

static const struct kiln_command vm_kernel_cmd = {
	.name = "kernel",
	.summary = "show or fetch the guest kernel",
	.usage = "Usage: kiln vm kernel [--fetch] [--dir DIR]\n\n"
		 "Show the guest kernel kiln boots: the first directory holding one of\n"
		 "$KILN_KERNEL (alone when set; $KILN_KERNEL_DIR is its older name),\n"
		 "$KILN_HOME/kernel, the installation's PREFIX/lib/kiln/kernel, the checkout's\n"
		 "build/kernel (both found beside the running kiln binary).\n",
	.run = run_kernel,
};

#define BOOT_USAGE(verb)                                                                                  \
	"Usage: kiln vm " verb " [OPTIONS] ROOTFS.ext4 [-- CMD [ARG...]]\n\n"                             \
	"Boot ROOTFS in a QEMU microVM (KVM if /dev/kvm is usable, else TCG); the image itself\n"   \
	"is never written.  With CMD, run it in the guest through the agent, stream its output\n"   \
	"and exit with its exit code; without, report the boot and stop.\n"

static const struct kiln_command vm_boot_cmd = {
	.name = "boot", .summary = "boot a rootfs image in a microVM", .usage = BOOT_USAGE("boot"), .run = run_boot,
};
static const struct kiln_command vm_run_cmd = {
	.name = "run", .summary = "the same as boot", .usage = BOOT_USAGE("run"), .run = run_boot,
};

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	static const struct kiln_command *const subs[] = { &vm_kernel_cmd, &vm_boot_cmd, &vm_run_cmd, NULL };

	return cli_dispatch(cmd, subs, argc, argv);
}

const struct kiln_command kiln_cmd_vm = {
	.name = "vm",
	.summary = "microVM debugging: boot a rootfs, run a command in it, show the kernel",
	.usage = "Usage: kiln vm kernel [--fetch] [--dir DIR]\n"
		 "       kiln vm boot [OPTIONS] ROOTFS.ext4 [-- CMD [ARG...]]\n"
		 "       kiln vm run  [OPTIONS] ROOTFS.ext4 [-- CMD [ARG...]]\n\n"
		 "Run 'kiln vm SUBCOMMAND --help' for details.\n",
	.run = run,
};
