/* prechunk.c — chunking a template for kiln push while it is being built
 * (docs/distribution.md "Chunked while the build runs"): a child process,
 * nice 10, chunks the rootfs as soon as it is written, while the build's own
 * work (storing the rootfs, booting, starting and snapshotting the VM: mostly
 * one core under TCG) goes on; the build then adds the small files and keeps
 * the artifact (chunks/made), so the first push after a build only uploads.
 * A process, not a thread: the build forks and clones jailed QEMUs, and a
 * clone() child of a threaded process may find a lock held by another thread. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "distrib/distrib.h"
#include "snapshots/snapshots.h"

struct dist_prechunk {
	pid_t pid;
	int fd;            /* the rootfs, open from the start to the end */
	struct stat st;    /* as it was at the start */
	char *result;      /* the child's part, as JSON */
	char *chunks_dir;
	double t0;
};

static json_t *part_json(const struct dist_tmpl_part *p)
{
	json_t *chunks = json_array();

	for (size_t i = 0; i < p->nchunks; i++)
		json_array_append_new(chunks, p->chunks[i] ? json_string(p->chunks[i]) : json_null());
	return json_pack("{s:s, s:s, s:I, s:I, s:o}", "role", p->role, "digest", p->digest, "size", (json_int_t)p->size,
			 "chunkSize", (json_int_t)p->chunk_size, "chunks", chunks);
}

/* The child's answer, checked as a pulled index would be. */
static int part_parse(const char *data, size_t len, struct dist_tmpl_part *p, kiln_error **err)
{
	json_t *j = kiln_json_loadb(data, len, "the chunked rootfs", err);
	const json_t *chunks = json_object_get(j, "chunks");
	const char *role = kiln_json_str(j, "role"), *dg = kiln_json_str(j, "digest");
	json_int_t size = kiln_json_int(j, "size", -1), cs = kiln_json_int(j, "chunkSize", 0);
	int rc = -1;

	memset(p, 0, sizeof(*p));
	if (j == NULL)
		return -1;
	if (!role || !dg || strcmp(dg, "sha256:") != 0 || size < 0 ||
	    cs < 4096 || !json_is_array(chunks) ||
	    json_array_size(chunks) != (size_t)(((uint64_t)size + (uint64_t)cs - 1) / (uint64_t)cs)) {
		kiln_err(err, KILN_E_INVALID, "the chunked rootfs is malformed");
		goto out;
	}
	p->role = kiln_xstrdup(role);
	p->size = (uint64_t)size;
	p->chunk_size = (uint64_t)cs;
	p->nchunks = json_array_size(chunks);
	p->chunks = kiln_xcalloc(p->nchunks ? p->nchunks : 1, sizeof(char *));
	for (size_t i = 0; i < p->nchunks; i++) {
		const json_t *c = json_array_get(chunks, i);
		if (json_is_null(c))
			continue;
		const char *d = json_string_value(c);
		if (d == NULL || kiln_digest_parse(d, NULL, NULL) < 0) {
			kiln_err(err, KILN_E_INVALID, "chunk %zu of the chunked rootfs is not a digest", i);
			goto out;
		}
		p->chunks[i] = kiln_xstrdup(d);
	}
	rc = 0;
out:
	if (rc < 0)
		dist_tmpl_part_free(p);
	json_decref(j);
	return rc;
}

/* The child: chunk, write the part, exit.  Nothing to stderr (the build's). */
static void child(int fd, const char *result)
{
	struct dist_tmpl_part p = { 0 };
	kiln_error *e = NULL;
	dist_chunks *cs = NULL;
	char path[64];
	int null;

	/* none of the build's descriptors: its locks, pipes and output are its own
	 * (a reader of kiln build's stdout gets its EOF when the build ends) */
	if ((fd != 3 && dup2(fd, 3) < 0) || (null = open("/dev/null", O_RDWR)) < 0 || dup2(null, 0) < 0 ||
	    dup2(null, 1) < 0 || dup2(null, 2) < 0)
		_exit(1);
	close_range(4, ~0U, 0);
	fd = 3;

	signal(SIGINT, SIG_DFL); /* not the build's VM clean-up */
	signal(SIGTERM, SIG_DFL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(1);
	/* the build's core first: this soaks up what it leaves idle.  Its own
	 * process group, so that one setpriority(PRIO_PGRP) reaches every thread
	 * (nice is per thread) when the build ends and waits for it. */
	setpgid(0, 0);
	setpriority(PRIO_PGRP, 0, 10);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	/* no sha256 of the whole file: the snapshot store hashes it beside us */
	if ((cs = dist_chunks_open(NULL, &e)) == NULL || dist_tmpl_chunk_file_unhashed(cs, path, "rootfs", &p, &e) < 0)
		_exit(1);
	snprintf(p.digest, sizeof(p.digest), "%s", "sha256:");
	json_t *j = part_json(&p);
	char *s = json_dumps(j, JSON_COMPACT);
	_exit(s && kiln_write_atomic(result, s, strlen(s), 0600, &e) == 0 ? 0 : 1);
}

dist_prechunk *dist_prechunk_start(const char *rootfs)
{
	const char *env = getenv("KILN_PRECHUNK");
	dist_prechunk *pc = NULL;
	dist_chunks *cs = NULL;
	kiln_error *e = NULL;
	int fd = -1;

	if (env && strcmp(env, "0") == 0)
		return NULL;
	/* opened here: the build may remove its scratch copy before the child is done */
	struct stat st;
	if ((fd = open(rootfs, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0 ||
	    (cs = dist_chunks_open(NULL, &e)) == NULL)
		goto out;
	pc = kiln_xcalloc(1, sizeof(*pc));
	pc->st = st;
	pc->chunks_dir = kiln_xstrdup(dist_chunks_dir(cs));
	pc->result = kiln_xasprintf("%s/tmp/prechunk-%ld.json", pc->chunks_dir, (long)getpid());
	pc->t0 = kiln_now_ms();
	fflush(NULL);
	if ((pc->pid = fork()) == 0)
		child(fd, pc->result);
	if (pc->pid > 0)
		setpgid(pc->pid, pc->pid); /* either side first: the group exists before any renice */
	if (pc->pid < 0) {
		free(pc->result);
		free(pc->chunks_dir);
		free(pc);
		pc = NULL;
	} else {
		pc->fd = fd;
		fd = -1;
	}
out:
	if (e)
		kiln_debug("chunking at build time: %s", kiln_error_message(e));
	kiln_error_free(e);
	dist_chunks_close(cs);
	if (fd >= 0)
		close(fd);
	return pc;
}

static void release(dist_prechunk *pc)
{
	close(pc->fd);
	unlink(pc->result);
	free(pc->result);
	free(pc->chunks_dir);
	free(pc);
}

void dist_prechunk_abort(dist_prechunk *pc)
{
	glob_t g = { 0 };
	int status;

	if (pc == NULL)
		return;
	kill(pc->pid, SIGKILL);
	kiln_waitpid(pc->pid, &status, 0);
	/* its half-written chunks: kiln_cas names temp files PID-XXXXXX */
	char *pat = kiln_xasprintf("%s/tmp/%ld-*", pc->chunks_dir, (long)pc->pid);
	if (glob(pat, 0, NULL, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc; i++)
			unlink(g.gl_pathv[i]);
	globfree(&g);
	free(pat);
	release(pc);
}

/* The template's other files, chunked here while the child may still be at
 * the rootfs (the build is over: both cores are the chunkers').  Each is the
 * store's blob named by its digest, hashed as it was stored seconds ago, so
 * the digest is the config's (as a restore takes it), not hashed again. */
static int chunk_rest(dist_chunks *cs, const char *template_ref, struct dist_tmpl_part *parts, size_t *n,
		      kiln_error **err)
{
	static const char *const roles[] = { "memory", "disk", "state" };
	snap_template *st = snap_template_open(template_ref, err);
	int rc = st ? 0 : -1;

	for (size_t i = 0; rc == 0 && i < sizeof(roles) / sizeof(roles[0]); i++) {
		const struct snap_config_blob *b = snap_config_blob(snap_template_config(st), roles[i]);
		char *path = snap_template_blob(st, roles[i], err);
		rc = path ? dist_tmpl_chunk_file_unhashed(cs, path, roles[i], &parts[*n], err) : -1;
		if (path)
			(*n)++; /* freed by the caller, also when half made */
		if (rc == 0 && (b == NULL || b->size != parts[*n - 1].size))
			rc = kiln_err(err, KILN_E_INVALID, "the stored %s is not the size its config names", roles[i]);
		else if (rc == 0)
			snprintf(parts[*n - 1].digest, KILN_DIGEST_MAX, "%s", b->digest);
		free(path);
	}
	snap_template_free(st);
	return rc;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The chunked rootfs is the one the template's config names: the file the
 * store hashed while the child read it, its contents unchanged from start to
 * end (size and mtime of the open file: a write sets the mtime; not the
 * ctime, which the build's removal of its scratch copy changes: nlink 0). */
static int rootfs_digest(dist_prechunk *pc, const char *template_ref, struct dist_tmpl_part *p, kiln_error **err)
{
	snap_template *st = snap_template_open(template_ref, err);
	const struct snap_config_blob *b = st ? snap_config_blob(snap_template_config(st), "rootfs") : NULL;
	struct stat now;
	int rc = -1;

	if (st == NULL)
		return -1;
	if (fstat(pc->fd, &now) < 0 || !same_file(&pc->st, &now))
		kiln_err(err, KILN_E_INVALID, "the rootfs changed while it was chunked");
	else if (b == NULL || b->size != p->size)
		kiln_err(err, KILN_E_INVALID, "the chunked rootfs has %llu bytes, the template's %llu",
			 (unsigned long long)p->size, (unsigned long long)(b ? b->size : 0));
	else {
		snprintf(p->digest, KILN_DIGEST_MAX, "%s", b->digest);
		rc = 0;
	}
	snap_template_free(st);
	return rc;
}

int dist_prechunk_finish(dist_prechunk *pc, const char *template_ref, kiln_error **err)
{
	struct dist_tmpl_part parts[4] = { 0 };
	struct dist_tmpl t = { 0 };
	dist_chunks *cs = NULL;
	char *data = NULL;
	size_t len = 0, n = 0;
	int status = 0, rc = -1;
	double t_build = kiln_now_ms(), t_rest = 0;

	/* The build is over: the child is no longer soaking up idle time but
	 * what the build waits for.  At nice 10 on a busy host it would get a
	 * tenth of a core's share (a build at load 4 took 34 s instead of 18).
	 * Lowering a nice value needs CAP_SYS_NICE: without it, it stays 10. */
	if (setpriority(PRIO_PGRP, pc->pid, 0) < 0)
		kiln_debug("chunking at build time: renice %ld: %s", (long)pc->pid, strerror(errno));
	if ((cs = dist_chunks_open(NULL, err)) == NULL || chunk_rest(cs, template_ref, parts, &n, err) < 0)
		goto out;
	t_rest = kiln_now_ms() - t_build;
	if (kiln_waitpid(pc->pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		kiln_err(err, KILN_E_GENERIC, "the chunking process failed (status %d)", status);
		goto out;
	}
	pc->pid = -1;
	double t_wait = kiln_now_ms();
	if (kiln_read_file(pc->result, &data, &len, 64u << 20, err) < 0 || part_parse(data, len, &parts[n], err) < 0)
		goto out;
	n++;
	if (rootfs_digest(pc, template_ref, &parts[n - 1], err) < 0 ||
	    dist_tmpl_make_from(cs, template_ref, parts, n, &t, err) < 0)
		goto out;
	kiln_info("chunked for kiln push: %zu blobs; the rootfs in %.1f s beside the build (done %.1f s after it), "
		  "the other files in %.1f s", t.nblobs, (t_wait - pc->t0) / 1e3, (t_wait - t_build) / 1e3, t_rest / 1e3);
	/* no eviction here (a walk of the whole store): the push that follows keeps it within its limit */
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "chunking template %s at build time", template_ref);
	for (size_t i = 0; i < n; i++)
		dist_tmpl_part_free(&parts[i]);
	dist_tmpl_free(&t);
	dist_chunks_close(cs);
	free(data);
	if (pc->pid > 0) { /* failed before the child was done */
		kill(pc->pid, SIGKILL);
		kiln_waitpid(pc->pid, &status, 0);
	}
	release(pc);
	return rc;
}
