/* test_snap_sandbox.c — sandbox bookkeeping without a VM: what `ls` calls a
 * sandbox given its state file and the processes that really exist (a reused
 * pid is not the recorded process), pool marks and claims, a detached spawn
 * that outlives its parent's wait, and gc removing only what is dead. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "snapshots/internal.h"
#include "vm/internal.h"
#include "test.h"

static char *home;

static void put_state(const char *id, json_t *st)
{
	char *dir = snap_sandbox_dir(id), *path = kiln_path_join(dir, "state.json");
	kiln_error *err = NULL;

	CHECK_INT(kiln_mkdir_p(dir, 0700, &err), 0);
	CHECK_INT(kiln_json_write_file(path, st, &err), 0);
	kiln_error_free(err);
	free(dir);
	free(path);
}

static void touch(const char *id, const char *name)
{
	char *dir = snap_sandbox_dir(id), *path = kiln_path_join(dir, name);
	kiln_error *err = NULL;

	CHECK_INT(kiln_write_atomic(path, "", 0, 0644, &err), 0);
	kiln_error_free(err);
	free(dir);
	free(path);
}

static void test_liveness(void)
{
	json_int_t me = getpid(), start = (json_int_t)vm_proc_start_time(getpid());
	json_t *st;

	CHECK(start > 0);
	CHECK_INT(vm_proc_start_time(-1), 0);
	st = json_pack("{s:s, s:s, s:I, s:I}", "id", "aaaaaaaaaaaa", "state", "running", "pid", me, "pid_start", start);
	CHECK_STR(snap_sandbox_liveness(st), "running");
	json_object_set_new(st, "pid_start", json_integer(start + 1)); /* the pid was reused */
	CHECK_STR(snap_sandbox_liveness(st), "dead");
	json_decref(st);

	st = json_pack("{s:s, s:s, s:I, s:I}", "id", "aaaaaaaaaaaa", "state", "creating", "creator", me,
		       "creator_start", start);
	CHECK_STR(snap_sandbox_liveness(st), "creating");
	json_object_set_new(st, "creator", json_integer(0x3ffffff0)); /* no such process */
	CHECK_STR(snap_sandbox_liveness(st), "dead");
	json_decref(st);

	/* Pooled: claimable with its mark, "creating" while a live kiln claims it, else dead. */
	st = json_pack("{s:s, s:s, s:I, s:I}", "id", "bbbbbbbbbbbb", "state", "pooled", "pid", me, "pid_start", start);
	put_state("bbbbbbbbbbbb", st);
	CHECK_STR(snap_sandbox_liveness(st), "dead");
	touch("bbbbbbbbbbbb", SNAP_POOL_MARK);
	CHECK_STR(snap_sandbox_liveness(st), "pooled");
	char *dir = snap_sandbox_dir("bbbbbbbbbbbb");
	char *mark = kiln_path_join(dir, SNAP_POOL_MARK), *claim = kiln_xasprintf("%s/claim-%ld", dir, (long)getpid());
	CHECK_INT(rename(mark, claim), 0);
	CHECK_STR(snap_sandbox_liveness(st), "creating");
	CHECK(rename(mark, claim) < 0); /* a second claimer loses */
	char *dead_claim = kiln_xasprintf("%s/claim-%d", dir, 0x3ffffff0);
	CHECK_INT(rename(claim, dead_claim), 0);
	CHECK_STR(snap_sandbox_liveness(st), "dead");
	/* Its "QEMU" is this test: out of gc's way. */
	kiln_error *err = NULL;
	CHECK_INT(kiln_rm_rf(dir, &err), 0);
	kiln_error_free(err);
	free(dir);
	free(mark);
	free(claim);
	free(dead_claim);
	json_decref(st);

	CHECK_STR(snap_sandbox_liveness(NULL), "dead");
}

/* state.json is replaced whole (no fsync: runtime state), no temporary left. */
static void test_state_write(void)
{
	char *dir = snap_sandbox_dir("cccccccccccc"), *tmp = kiln_path_join(dir, "state.json.tmp");
	json_t *st = json_pack("{s:s, s:s}", "id", "cccccccccccc", "state", "pooled"), *back;
	kiln_error *err = NULL;

	CHECK_INT(kiln_mkdir_p(dir, 0700, &err), 0);
	CHECK_INT(snap_state_write(dir, st, &err), 0);
	json_object_set_new(st, "state", json_string("running"));
	CHECK_INT(snap_state_write(dir, st, &err), 0);
	back = snap_sandbox_state("cccccccccccc", &err);
	CHECK_STR(kiln_json_str(back, "state"), "running");
	CHECK(access(tmp, F_OK) < 0);
	json_decref(back);
	/* A directory that is gone is an error, not a crash or a stray file. */
	CHECK_INT(kiln_rm_rf(dir, &err), 0);
	CHECK_INT(snap_state_write(dir, st, &err), -1);
	CHECK(err != NULL);
	kiln_error_free(err);
	json_decref(st);
	free(dir);
	free(tmp);
}

static void test_spawn_and_gc(void)
{
	char *log = kiln_path_join(home, "sleep.log");
	kiln_error *err = NULL;
	struct vm_spawn_opts so = { .log_path = log, .tmpdir = home, .detached = true };
	pid_t pid = vm_spawn((char *const[]){ "sleep", "30", NULL }, &so, &err);
	unsigned long long start;

	CHECK(pid > 0);
	start = vm_proc_start_time(pid);
	CHECK(start > 0);
	CHECK(getpgid(pid) != getpgid(0)); /* its own session: ^C to us is not to it */

	/* One live sandbox (the sleep stands for its QEMU), one dead, one unreadable. */
	json_t *live = json_pack("{s:s, s:s, s:I, s:I}", "id", "cccccccccccc", "state", "running", "pid",
				 (json_int_t)pid, "pid_start", (json_int_t)start);
	put_state("cccccccccccc", live);
	json_t *dead = json_pack("{s:s, s:s, s:I, s:I}", "id", "dddddddddddd", "state", "running", "pid",
				 (json_int_t)0x3ffffff0, "pid_start", (json_int_t)1);
	put_state("dddddddddddd", dead);
	char *broken = snap_sandbox_dir("eeeeeeeeeeee");
	CHECK_INT(kiln_mkdir_p(broken, 0700, &err), 0);

	json_t *list = snap_sandbox_list(&err);
	int running = 0, gone = 0;
	for (size_t i = 0; list && i < json_array_size(list); i++) {
		const char *s = kiln_json_str(json_array_get(list, i), "state");
		running += strcmp(s, "running") == 0;
		gone += strcmp(s, "dead") == 0;
	}
	CHECK_INT(running, 1);
	CHECK_INT(gone, 2); /* dddd and eeee */
	json_decref(list);

	CHECK_INT(snap_sandbox_gc(&err), 2);
	CHECK(access(broken, F_OK) < 0);
	CHECK(vm_proc_start_time(pid) == start); /* the live one is kept */

	CHECK_INT(snap_sandbox_kill("cccccccccccc", &err), 0);
	CHECK_INT(vm_proc_start_time(pid), 0);
	CHECK(snap_sandbox_kill("cccccccccccc", &err) < 0);
	CHECK(err && err->kind == KILN_E_NOTFOUND);
	kiln_error_clear(&err);
	CHECK(snap_sandbox_kill("../../etc", &err) < 0); /* not an id: never a path */
	kiln_error_clear(&err);

	json_decref(live);
	json_decref(dead);
	free(broken);
	free(log);
}

int main(void)
{
	kiln_error *err = NULL;

	home = kiln_mkdtemp("kiln-test-sandbox", &err);
	if (home == NULL)
		return 1;
	setenv("KILN_HOME", home, 1);
	RUN(test_liveness);
	RUN(test_state_write);
	RUN(test_spawn_and_gc);
	kiln_rm_rf(home, &err);
	kiln_error_free(err);
	free(home);
	return test_done();
}
