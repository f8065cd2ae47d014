/* test_build_capture.c — a RUN step's capture (builder/exec_capture.c) through
 * the real agent on the host: an overlay-like upper directory streamed into a
 * change list — files small (in memory) and large (spilled to scratch), a
 * hard link group whose content goes to its smallest name, symlinks, fifos,
 * overlay whiteouts and opaque directories (as root), the runtime's files and
 * sockets left out — and written as a layer with the right bytes. */
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "builder/internal.h"
#include "guest/guest.h"
#include "test.h"

static pid_t agent_pid;

static guest_conn *start_agent(void)
{
	const char *bin = getenv("KILN_AGENT") && *getenv("KILN_AGENT") ? getenv("KILN_AGENT") : "bin/kiln-agent";
	kiln_error *err = NULL;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return NULL;
	agent_pid = fork();
	if (agent_pid == 0) {
		dup2(sv[1], 3);
		execl(bin, bin, "--fd", "3", (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	guest_conn *c = guest_conn_from_fd(sv[0], 10000, &err);
	if (!c)
		printf("# connect: %s\n", kiln_error_message(err));
	kiln_error_free(err);
	return c;
}

static void put(const char *dir, const char *name, const char *data, size_t len)
{
	char *p = kiln_path_join(dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || kiln_write_full(fd, data, len) < 0)
		printf("# write %s failed\n", p);
	if (fd >= 0)
		close(fd);
	free(p);
}

static const struct build_item *find(const struct build_changes *ch, const char *dest)
{
	for (size_t i = 0; i < ch->n; i++)
		if (strcmp(ch->v[i].dest, dest) == 0)
			return &ch->v[i];
	return NULL;
}

static void test_capture(void)
{
	kiln_error *err = NULL;
	char *tmp = kiln_mkdtemp("kiln-test-capture", &err);
	char *up = kiln_path_join(tmp, "u"), *scratch = kiln_path_join(tmp, "scratch"), *p;
	struct build_changes ch = { 0 };
	build_store *s = NULL;
	struct build_layer l;
	bool root = geteuid() == 0;
	size_t big_len = 3u << 20;
	char *big = kiln_xmalloc(big_len);
	guest_conn *c = start_agent();

	CHECK(c != NULL);
	if (!c)
		goto out;
	for (size_t i = 0; i < big_len; i++)
		big[i] = (char)(i * 7 + i / 4096);
	mkdir(up, 0755);
	p = kiln_path_join(up, "etc");
	mkdir(p, 0755);
	free(p);
	put(up, "etc/resolv.conf", "nameserver 10.0.2.3\n", 20);
	put(up, "etc/motd", "hi\n", 3);
	put(up, "big.bin", big, big_len);
	/* the group's first name in the walk is not its smallest */
	put(up, "zz-data", "shared\n", 7);
	{
		char *a = kiln_path_join(up, "zz-data"), *b = kiln_path_join(up, "aa-link"),
		     *d = kiln_path_join(up, "etc/mm-link");
		CHECK(link(a, b) == 0 && link(a, d) == 0);
		free(a);
		free(b);
		free(d);
	}
	p = kiln_path_join(up, "sym");
	CHECK(symlink("etc/motd", p) == 0);
	free(p);
	p = kiln_path_join(up, "fifo");
	CHECK(mkfifo(p, 0600) == 0);
	free(p);
	{
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/sock", up);
		CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
		if (fd >= 0)
			close(fd);
	}
	if (root) {
		p = kiln_path_join(up, "gone");
		CHECK(mknod(p, S_IFCHR | 0, makedev(0, 0)) == 0);
		free(p);
		p = kiln_path_join(up, "opq");
		mkdir(p, 0750);
		CHECK(setxattr(p, "trusted.overlay.opaque", "y", 1, 0) == 0);
		free(p);
		put(up, "opq/x", "x", 1);
		CHECK(chown(up, 0, 0) == 0);
		p = kiln_path_join(up, "etc/motd");
		CHECK(lchown(p, 1000, 1001) == 0);
		free(p);
	}
	if (build_upper_changes(c, up, scratch, &ch, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		CHECK(!"captured");
		goto out;
	}
	build_changes_finish(&ch);
	const struct build_item *it;
	CHECK(find(&ch, "etc/resolv.conf") == NULL);
	CHECK(find(&ch, "sock") == NULL);
	CHECK((it = find(&ch, "etc")) && S_ISDIR(it->mode));
	CHECK((it = find(&ch, "etc/motd")) && it->data && it->size == 3 && memcmp(it->data, "hi\n", 3) == 0);
	if (root && it)
		CHECK(it->uid == 1000 && it->gid == 1001);
	CHECK((it = find(&ch, "big.bin")) && it->src && !it->data && it->size == big_len);
	if (it && it->src) {
		char *got = NULL;
		size_t n = 0;
		CHECK(kiln_read_file(it->src, &got, &n, 0, &err) == 0 && n == big_len && memcmp(got, big, n) == 0);
		CHECK(strncmp(it->src, scratch, strlen(scratch)) == 0);
		free(got);
	}
	CHECK((it = find(&ch, "aa-link")) && !it->hardlink && it->data && it->size == 7);
	CHECK((it = find(&ch, "zz-data")) && it->hardlink && strcmp(it->hardlink, "aa-link") == 0 && !it->data);
	CHECK((it = find(&ch, "etc/mm-link")) && it->hardlink && strcmp(it->hardlink, "aa-link") == 0);
	CHECK((it = find(&ch, "sym")) && S_ISLNK(it->mode) && strcmp(it->link, "etc/motd") == 0);
	CHECK((it = find(&ch, "fifo")) && S_ISFIFO(it->mode) && (it->mode & 07777) == 0600);
	if (root) {
		CHECK(find(&ch, "gone") == NULL);
		CHECK((it = find(&ch, ".wh.gone")) && S_ISREG(it->mode));
		CHECK(find(&ch, "opq/.wh..wh..opq") != NULL);
		CHECK((it = find(&ch, "opq")) && S_ISDIR(it->mode) && (it->mode & 07777) == 0750 && it->n_xattrs == 0);
	} else {
		test_skip_part("whiteouts and opaque directories", "needs root");
	}
	/* and as a layer: content from memory and from the spilled file */
	if (build_store_open(tmp, &s, &err) < 0 || build_layer_write(s, &ch, BUILD_NONE, 0, &l, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		CHECK(!"layer written");
		goto out;
	}
	char *blob = build_store_blob_path(s, l.digest);
	struct archive *a = kiln_tar_reader_new();
	struct archive_entry *e;
	int seen = 0;
	CHECK(archive_read_open_filename(a, blob, 65536) == ARCHIVE_OK);
	while (kiln_tar_next(a, &e) == ARCHIVE_OK) {
		const char *name = archive_entry_pathname(e);
		char buf[8];
		if (strcmp(name, "big.bin") == 0) {
			char *got = kiln_xmalloc(big_len);
			CHECK(archive_read_data(a, got, big_len) == (la_ssize_t)big_len && memcmp(got, big, big_len) == 0);
			free(got);
			seen++;
		} else if (strcmp(name, "aa-link") == 0) {
			CHECK(archive_read_data(a, buf, sizeof(buf)) == 7 && memcmp(buf, "shared\n", 7) == 0);
			seen++;
		} else if (strcmp(name, "zz-data") == 0) {
			CHECK(archive_entry_hardlink(e) && strcmp(archive_entry_hardlink(e), "aa-link") == 0);
			seen++;
		}
	}
	CHECK_INT(seen, 3);
	archive_read_free(a);
	free(blob);
out:
	if (err)
		kiln_error_free(err);
	build_changes_free(&ch);
	build_store_close(s);
	guest_close(c);
	if (agent_pid > 0)
		waitpid(agent_pid, NULL, 0);
	kiln_rm_rf(tmp, NULL);
	free(tmp);
	free(up);
	free(scratch);
	free(big);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_capture);
	return test_done();
}
