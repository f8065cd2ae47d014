/* test_vm_qcow2.c — vm_qcow2_check: a disk from the store may name no host
 * file.  Images made by the real qemu-img: no backing, the allowed relative
 * name, an absolute host path, another relative name, an external data file,
 * and files that are no qcow2 at all. */
#include <stdlib.h>
#include <string.h>

#include "vm/vm.h"
#include "test.h"

static char *tmpdir;

/* Run a shell command in tmpdir. */
static int sh(const char *cmd)
{
	char *full = kiln_xasprintf("cd '%s' && %s >/dev/null 2>&1", tmpdir, cmd);
	int rc = system(full);

	free(full);
	return rc;
}

static int check(const char *name, const char *want, char **msg)
{
	char *p = kiln_path_join(tmpdir, name);
	kiln_error *err = NULL;
	int rc = vm_qcow2_check(p, want, &err);

	*msg = kiln_xstrdup(err ? kiln_error_message(err) : "");
	kiln_error_free(err);
	free(p);
	return rc;
}

static void test_backing(void)
{
	char *m = NULL;

	CHECK(sh("qemu-img create -q -f qcow2 plain.qcow2 16M") == 0);
	CHECK(check("plain.qcow2", "abc", &m) == 0);
	free(m);
	CHECK(sh("truncate -s 16M abc && qemu-img create -q -f qcow2 -F raw -b abc ok.qcow2") == 0);
	CHECK(check("ok.qcow2", "abc", &m) == 0);
	free(m);
	CHECK(check("ok.qcow2", "other", &m) < 0);
	CHECK(strstr(m, "names the backing file 'abc'") != NULL);
	free(m);
	CHECK(sh("qemu-img create -q -f qcow2 -F raw -u -b /etc/shadow evil.qcow2 16M") == 0);
	CHECK(check("evil.qcow2", "abc", &m) < 0);
	CHECK(strstr(m, "'/etc/shadow'") != NULL && strstr(m, "refused") != NULL);
	free(m);
	CHECK(check("evil.qcow2", NULL, &m) < 0);
	free(m);
}

static void test_data_file(void)
{
	char *m = NULL;

	CHECK(sh("qemu-img create -q -f qcow2 -o data_file=data.raw df.qcow2 16M") == 0);
	CHECK(check("df.qcow2", "abc", &m) < 0);
	CHECK(strstr(m, "external data file") != NULL);
	free(m);
}

static void test_not_qcow2(void)
{
	char *m = NULL;

	CHECK(sh("printf 'not a disk' > junk") == 0);
	CHECK(check("junk", "abc", &m) < 0);
	CHECK(strstr(m, "not a qcow2 image") != NULL);
	free(m);
	CHECK(sh("ln -sf /etc/passwd link") == 0);
	CHECK(check("link", "abc", &m) < 0); /* O_NOFOLLOW: a symlink is not opened */
	free(m);
	CHECK(check("missing", "abc", &m) < 0);
	free(m);
}

int main(void)
{
	kiln_error *err = NULL;

	tmpdir = kiln_mkdtemp("kiln-test-qcow2", &err);
	if (tmpdir == NULL)
		return 1;
	RUN(test_backing);
	RUN(test_data_file);
	RUN(test_not_qcow2);
	kiln_rm_rf(tmpdir, &err);
	free(tmpdir);
	return test_done();
}
