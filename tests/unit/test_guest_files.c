/* test_guest_files.c — stat, upload and download through the real agent on
 * the host: a tree with files, modes, owners, directories, symlinks, a hard
 * link and a long name goes up (libarchive -> guest tar) and comes back down
 * (guest tar -> libarchive) identical, once with GNU tar, once with
 * busybox tar as the guest's tar, and once with the agent's own writer
 * (tarc.c) for downloads. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln.h"
#include "guest/guest.h"
#include "test.h"

static pid_t agent_pid;
static guest_conn *conn;
static char *tmp;

static const char *agent_bin(void)
{
	const char *p = getenv("KILN_AGENT");
	return p && *p ? p : "bin/kiln-agent";
}

static guest_conn *start_agent(const char *tar)
{
	int sv[2];
	kiln_error *err = NULL;
	guest_conn *c;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return NULL;
	agent_pid = fork();
	if (agent_pid == 0) {
		dup2(sv[1], 3);
		if (tar)
			execl(agent_bin(), agent_bin(), "--fd", "3", "--tar", tar, (char *)NULL);
		else
			execl(agent_bin(), agent_bin(), "--fd", "3", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	c = guest_conn_from_fd(sv[0], 10000, &err);
	if (c == NULL) {
		printf("# connect: %s\n", kiln_error_message(err));
		kiln_error_free(err);
	}
	return c;
}

static void stop_agent(void)
{
	guest_close(conn);
	conn = NULL;
	waitpid(agent_pid, NULL, 0);
}

static void write_file(const char *dir, const char *name, const char *data, mode_t mode)
{
	char *p = kiln_path_join(dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd >= 0) {
		if (write(fd, data, strlen(data)) < 0)
			printf("# write %s failed\n", p);
		close(fd);
	}
	chmod(p, mode);
	free(p);
}

static void make_tree(const char *root, bool symlink_owner)
{
	char *p, longname[300];

	mkdir(root, 0755);
	write_file(root, "hello.txt", "hello world\n", 0644);
	write_file(root, "secret", "s3cr3t", 0600);
	write_file(root, "run.sh", "#!/bin/sh\necho hi\n", 0755);
	write_file(root, "empty", "", 0640);
	p = kiln_path_join(root, "sub");
	mkdir(p, 0750);
	free(p);
	p = kiln_path_join(root, "sub/deeper");
	mkdir(p, 0700);
	free(p);
	write_file(root, "sub/deeper/data.bin", "\x01\x02\x03 binary \xff", 0444);
	p = kiln_path_join(root, "sub/link-to-hello");
	if (symlink("../hello.txt", p) < 0)
		printf("# symlink failed\n");
	free(p);
	p = kiln_path_join(root, "dangling");
	if (symlink("/nonexistent/target", p) < 0)
		printf("# symlink failed\n");
	free(p);
	/* A name beyond ustar's 100 bytes needs pax (or GNU) headers. */
	memset(longname, 'n', 150);
	strcpy(longname + 150, ".txt");
	write_file(root, "sub", "", 0755); /* fails (a dir): harmless */
	p = kiln_path_join(root, "sub");
	write_file(p, longname, "long name\n", 0644);
	free(p);
	{
		char *a = kiln_path_join(root, "hello.txt"), *b = kiln_path_join(root, "hardlink.txt");
		if (link(a, b) < 0)
			printf("# link failed\n");
		free(a);
		free(b);
	}
	if (geteuid() == 0) {
		p = kiln_path_join(root, "secret");
		if (lchown(p, 1234, 5678) < 0)
			printf("# chown failed\n");
		free(p);
		/* busybox tar (1.35) does not restore the owner of symlinks. */
		p = kiln_path_join(root, "sub/link-to-hello");
		if (symlink_owner && lchown(p, 42, 43) < 0)
			printf("# lchown failed\n");
		free(p);
	}
}

/* Compare two trees: type, mode, owner, size, content, link target. */
static int compare(const char *a, const char *b, kiln_buf *diff)
{
	kiln_buf cmd = KILN_BUF_INIT;
	FILE *f;
	char line[512];
	int rc;

	/* find prints one line of metadata per entry; diff of the two listings. */
	kiln_buf_addf(&cmd,
		      "cd '%s' && find . -mindepth 1 -printf '%%p %%y %%m %%U %%G %%s %%l %%n\\n' | sort > '%s/a.lst' && "
		      "find . -mindepth 1 -type f -exec sha256sum {} + | sort > '%s/a.sum' && "
		      "cd '%s' && find . -mindepth 1 -printf '%%p %%y %%m %%U %%G %%s %%l %%n\\n' | sort > '%s/b.lst' && "
		      "find . -mindepth 1 -type f -exec sha256sum {} + | sort > '%s/b.sum' && "
		      "diff '%s/a.lst' '%s/b.lst' && diff '%s/a.sum' '%s/b.sum' 2>&1",
		      a, tmp, tmp, b, tmp, tmp, tmp, tmp, tmp, tmp);
	f = popen(cmd.buf, "r");
	while (f && fgets(line, sizeof(line), f))
		kiln_buf_adds(diff, line);
	rc = f ? pclose(f) : -1;
	kiln_buf_free(&cmd);
	return rc;
}

static void test_stat(void)
{
	struct guest_stat st;
	kiln_error *err = NULL;
	char *dir = kiln_path_join(tmp, "stat"), *p;

	make_tree(dir, true);
	p = kiln_path_join(dir, "run.sh");
	CHECK_INT(guest_stat_path(conn, p, 0, &st, 5000, &err), 0);
	CHECK(S_ISREG(st.mode));
	CHECK_INT(st.mode & 07777, 0755);
	CHECK_INT(st.size, 18);
	CHECK(st.mtime_sec > 1600000000);
	CHECK(st.link == NULL);
	guest_stat_free(&st);
	free(p);

	p = kiln_path_join(dir, "sub/link-to-hello");
	CHECK_INT(guest_stat_path(conn, p, 0, &st, 5000, &err), 0);
	CHECK(S_ISLNK(st.mode));
	CHECK_STR(st.link, "../hello.txt");
	if (geteuid() == 0)
		CHECK(st.uid == 42 && st.gid == 43);
	else
		test_skip_part("symlink owner", "needs root");
	guest_stat_free(&st);
	CHECK_INT(guest_stat_path(conn, p, GUEST_STAT_FOLLOW, &st, 5000, &err), 0); /* followed */
	CHECK(S_ISREG(st.mode) && st.size == 12 && st.link == NULL);
	guest_stat_free(&st);
	free(p);

	CHECK_INT(guest_stat_path(conn, dir, 0, &st, 5000, &err), 0);
	CHECK(S_ISDIR(st.mode));
	guest_stat_free(&st);

	/* Extended attributes, as overlayfs marks an opaque directory. */
	p = kiln_path_join(dir, "sub");
	if (setxattr(p, "user.kiln", "v\0bin", 5, 0) == 0) {
		const struct guest_xattr *x;
		bool root = geteuid() == 0 && setxattr(p, "trusted.overlay.opaque", "y", 1, 0) == 0;
		CHECK_INT(guest_stat_path(conn, p, GUEST_STAT_XATTRS, &st, 5000, &err), 0);
		x = guest_stat_xattr(&st, "user.kiln");
		CHECK(x && x->len == 5 && memcmp(x->value, "v\0bin", 5) == 0);
		if (root) {
			x = guest_stat_xattr(&st, "trusted.overlay.opaque");
			CHECK(x && x->len == 1 && x->value[0] == 'y');
		} else {
			test_skip_part("trusted.* xattr", "needs root");
		}
		CHECK(guest_stat_xattr(&st, "user.none") == NULL);
		guest_stat_free(&st);
		/* Without the flag none are sent. */
		CHECK_INT(guest_stat_path(conn, p, 0, &st, 5000, &err), 0);
		CHECK_INT(st.nxattrs, 0);
		guest_stat_free(&st);
	} else {
		test_skip_part("xattrs", "no user xattrs on this filesystem");
	}
	free(p);

	CHECK_INT(guest_stat_path(conn, "/nonexistent/x", 0, &st, 5000, &err), -1);
	CHECK(err && err->kind == KILN_E_NOTFOUND && err->errnum == ENOENT);
	CHECK(err && strstr(kiln_error_message(err), "stat /nonexistent/x: No such file or directory"));
	kiln_error_clear(&err);
	free(dir);
}

static void roundtrip(const char *label, bool symlink_owner)
{
	kiln_error *err = NULL;
	char *src = kiln_xasprintf("%s/src-%s", tmp, label);
	char *guest = kiln_xasprintf("%s/guest-%s/a/b", tmp, label); /* parents are created */
	char *back = kiln_xasprintf("%s/back-%s", tmp, label);
	kiln_buf diff = KILN_BUF_INIT;
	struct guest_stat st;
	char *p;

	make_tree(src, symlink_owner);
	CHECK_INT(guest_upload_dir(conn, src, guest, 20000, &err), 0);
	if (err)
		printf("#   upload: %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	/* What landed in the "guest", seen through the agent. */
	p = kiln_path_join(guest, "secret");
	CHECK_INT(guest_stat_path(conn, p, 0, &st, 5000, &err), 0);
	CHECK_INT(st.mode & 07777, 0600);
	if (geteuid() == 0)
		CHECK(st.uid == 1234 && st.gid == 5678);
	else
		test_skip_part("file owner", "needs root");
	guest_stat_free(&st);
	free(p);
	CHECK_INT(compare(src, guest, &diff), 0);
	if (diff.len)
		printf("#   upload diff:\n%s", diff.buf);
	kiln_buf_reset(&diff);

	CHECK_INT(guest_download_dir(conn, guest, back, 20000, &err), 0);
	if (err)
		printf("#   download: %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	CHECK_INT(compare(src, back, &diff), 0);
	if (diff.len)
		printf("#   download diff:\n%s", diff.buf);
	kiln_buf_free(&diff);
	free(src);
	free(guest);
	free(back);
}

static void test_roundtrip_gnu_tar(void)
{
	roundtrip("gnu", true);
}

static void test_raw_tar_fd(void)
{
	kiln_error *err = NULL;
	char *src = kiln_path_join(tmp, "src-gnu");
	char *tarfile = kiln_path_join(tmp, "dl.tar");
	char *guest2 = kiln_path_join(tmp, "guest-raw");
	kiln_buf diff = KILN_BUF_INIT;
	int fd = open(tarfile, O_RDWR | O_CREAT | O_TRUNC, 0644);

	CHECK(fd >= 0);
	CHECK_INT(guest_download_tar(conn, src, fd, 20000, &err), 0);
	kiln_error_clear(&err);
	CHECK(lseek(fd, 0, SEEK_END) > 10240);
	lseek(fd, 0, SEEK_SET);
	CHECK_INT(guest_upload_tar(conn, guest2, fd, 20000, &err), 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	close(fd);
	CHECK_INT(compare(src, guest2, &diff), 0);
	kiln_buf_free(&diff);
	free(src);
	free(tarfile);
	free(guest2);
}

static void test_transfer_errors(void)
{
	kiln_error *err = NULL;
	char *dst = kiln_path_join(tmp, "never");
	char *file = kiln_path_join(tmp, "stat/hello.txt");
	int fds[2];

	/* Downloading a missing directory. */
	CHECK_INT(guest_download_dir(conn, "/nonexistent/dir", dst, 5000, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "download /nonexistent/dir: No such file"));
	kiln_error_clear(&err);
	/* Uploading below a file. */
	CHECK_INT(guest_upload_dir(conn, tmp, file, 5000, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "Not a directory"));
	kiln_error_clear(&err);
	/* Garbage instead of a tar: the guest's tar fails and says so. */
	if (pipe(fds) == 0) {
		if (write(fds[1], "this is not a tar archive, not at all......", 43) < 0)
			printf("# write failed\n");
		close(fds[1]);
		CHECK_INT(guest_upload_tar(conn, dst, fds[0], 5000, &err), -1);
		CHECK(err && strstr(kiln_error_message(err), "tar -x into"));
		if (err)
			printf("#   %s\n", kiln_error_message(err));
		kiln_error_clear(&err);
		close(fds[0]);
	}
	/* Relative guest paths are refused before anything is sent. */
	CHECK_INT(guest_upload_dir(conn, tmp, "relative/dir", 5000, &err), -1);
	CHECK(err && err->kind == KILN_E_USAGE);
	kiln_error_clear(&err);
	/* And the connection is still good. */
	CHECK_INT(guest_ping(conn, 5000, &err), 0);
	kiln_error_free(err);
	free(dst);
	free(file);
}

static void test_upload_owned(void)
{
	kiln_error *err = NULL;
	char *src = kiln_path_join(tmp, "src-gnu");
	char *dst = kiln_path_join(tmp, "owned");
	const char *names[] = { "secret", "sub", "sub/deeper/data.bin", "sub/link-to-hello", NULL };
	struct guest_stat st;

	if (geteuid() != 0)
		SKIP("needs root to chown");
	CHECK_INT(guest_upload_dir_owned(conn, src, dst, 77, 88, 20000, &err), 0);
	for (int i = 0; names[i]; i++) {
		char *p = kiln_path_join(dst, names[i]);
		CHECK_INT(guest_stat_path(conn, p, 0, &st, 5000, &err), 0);
		CHECK(st.uid == 77 && st.gid == 88);
		guest_stat_free(&st);
		free(p);
	}
	kiln_error_free(err);
	free(src);
	free(dst);
}

static void test_roundtrip_busybox_tar(void)
{
	stop_agent();
	if (access("/bin/busybox", X_OK) != 0 && access("/usr/bin/busybox", X_OK) != 0) {
		printf("# busybox not installed\n");
		CHECK(0);
		return;
	}
	conn = start_agent("busybox");
	CHECK(conn != NULL);
	if (conn == NULL)
		return;
	CHECK(guest_conn_caps(conn) & GUEST_CAP_UPLOAD);
	roundtrip("busybox", false);
}

/* Without --tar, downloads come from the agent's own writer (tarc.c). */
static void test_roundtrip_own_writer(void)
{
	kiln_error *err = NULL;
	char *src = kiln_path_join(tmp, "src-own"), *back = kiln_path_join(tmp, "back-one");
	char *p = kiln_path_join(src, "sub"), *want = kiln_path_join(back, "copy");
	char *fifo = kiln_path_join(src, "fifo"), *whole = kiln_path_join(tmp, "back-fifo");
	kiln_buf diff = KILN_BUF_INIT;

	stop_agent();
	conn = start_agent(NULL);
	CHECK(conn != NULL);
	if (conn == NULL)
		goto out;
	CHECK(guest_conn_caps(conn) & GUEST_CAP_DOWNLOAD);
	roundtrip("own", true);
	/* a fifo comes back as a fifo */
	CHECK(mkfifo(fifo, 0640) == 0);
	CHECK_INT(guest_download_dir(conn, src, whole, 20000, &err), 0);
	kiln_error_clear(&err);
	CHECK_INT(compare(src, whole, &diff), 0);
	kiln_buf_reset(&diff);
	/* one entry of a directory, under another name */
	CHECK_INT(guest_download_entry(conn, src, "sub", back, "copy", 20000, &err), 0);
	if (err)
		printf("#   %s\n", kiln_error_message(err));
	kiln_error_clear(&err);
	CHECK_INT(compare(p, want, &diff), 0);
	if (diff.len)
		printf("#   entry diff:\n%s", diff.buf);
	/* a file that is not there fails the transfer with the writer's words */
	CHECK_INT(guest_download_entry(conn, src, "missing", back, "m", 20000, &err), -1);
	CHECK(err && strstr(kiln_error_message(err), "missing"));
	kiln_error_clear(&err);
	CHECK_INT(guest_ping(conn, 5000, &err), 0);
	kiln_error_free(err);
out:
	unlink(fifo);
	kiln_buf_free(&diff);
	free(src);
	free(back);
	free(p);
	free(want);
	free(fifo);
	free(whole);
}

int main(void)
{
	kiln_error *err = NULL;
	int rc;

	signal(SIGPIPE, SIG_IGN);
	tmp = kiln_mkdtemp("kiln-test-guest", &err);
	conn = tmp ? start_agent("tar") : NULL;
	if (conn == NULL) {
		printf("not ok - start the agent\n");
		return 1;
	}
	RUN(test_stat);
	RUN(test_roundtrip_gnu_tar);
	RUN(test_raw_tar_fd);
	RUN(test_transfer_errors);
	RUN(test_upload_owned);
	RUN(test_roundtrip_busybox_tar);
	RUN(test_roundtrip_own_writer);
	stop_agent();
	kiln_rm_rf(tmp, &err);
	kiln_error_free(err);
	free(tmp);
	rc = test_done();
	return rc;
}
