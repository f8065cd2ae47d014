/* test_rootfs_place.c — pass-1 data placement: which groups hold backup
 * superblocks, and how a file's runs skip their reserved areas, stay
 * contiguous otherwise, and give sparse files blocks only for data. */
#include <stdlib.h>
#include <string.h>

#include "rootfs/internal.h"
#include "test.h"

static void test_backup_groups(void)
{
	static const unsigned yes[] = { 0, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125, 243, 343, 625, 729 };
	static const unsigned no[] = { 2, 4, 6, 8, 10, 11, 15, 21, 26, 35, 50, 100, 124, 126, 242 };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		CHECK(rootfs_backup_group(yes[i]));
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		CHECK(!rootfs_backup_group(no[i]));
}

static struct rootfs_inode *file(uint64_t size)
{
	struct rootfs_inode *ino = rootfs_inode_new(S_IFREG | 0644);

	ino->refs = 1;
	ino->size = size;
	ino->exts = kiln_xcalloc(1, sizeof(*ino->exts));
	ino->exts[0].len = size;
	ino->nexts = 1;
	return ino;
}

static void test_runs_skip_backups(void)
{
	rootfs_tree *t = rootfs_tree_new(NULL);
	uint64_t start = ROOTFS_GROUP_BLOCKS + ROOTFS_BACKUP_RESERVE;
	struct rootfs_inode *a, *b, *c;

	t->data_start = t->data_next = start;
	a = file(10000); /* 3 blocks */
	rootfs_place(t, a);
	CHECK_INT(a->nruns, 1);
	CHECK_INT(a->runs[0].pblk, start);
	CHECK_INT(a->runs[0].len, 3);
	/* a file crossing from group 2 into group 3 (a backup group) is split */
	b = file((uint64_t)(3 * ROOTFS_GROUP_BLOCKS - t->data_next + 10) * 4096);
	rootfs_place(t, b);
	CHECK_INT(b->nruns, 2);
	CHECK_INT(b->runs[0].pblk + b->runs[0].len, 3 * ROOTFS_GROUP_BLOCKS);
	CHECK_INT(b->runs[1].pblk, 3 * ROOTFS_GROUP_BLOCKS + ROOTFS_BACKUP_RESERVE);
	CHECK_INT(b->runs[1].lblk, b->runs[0].len);
	CHECK_INT(b->runs[1].len, 10);
	/* group 1 → 2 is not a boundary: one run straight through */
	t->data_next = 2 * ROOTFS_GROUP_BLOCKS - 5;
	c = file(20 * 4096);
	rootfs_place(t, c);
	CHECK_INT(c->nruns, 1);
	CHECK_INT(c->runs[0].len, 20);
	rootfs_inode_unref(a);
	rootfs_inode_unref(b);
	rootfs_inode_unref(c);
	rootfs_tree_free(t);
}

static void test_sparse_runs(void)
{
	rootfs_tree *t = rootfs_tree_new(NULL);
	struct rootfs_inode *s = rootfs_inode_new(S_IFREG | 0644);

	t->data_start = t->data_next = ROOTFS_GROUP_BLOCKS + ROOTFS_BACKUP_RESERVE;
	s->refs = 1;
	s->size = 64 << 20;
	s->exts = kiln_xcalloc(2, sizeof(*s->exts));
	s->exts[0].off = 0;
	s->exts[0].len = 100;
	s->exts[1].off = 32 << 20;
	s->exts[1].len = 5000;
	s->nexts = 2;
	rootfs_place(t, s);
	CHECK_INT(s->nruns, 2);
	CHECK_INT(s->runs[0].lblk, 0);
	CHECK_INT(s->runs[0].len, 1);
	CHECK_INT(s->runs[1].lblk, (32 << 20) / 4096);
	CHECK_INT(s->runs[1].len, 2);
	CHECK_INT(s->runs[1].pblk, s->runs[0].pblk + 1);
	CHECK_INT(t->data_next - t->data_start, 3);
	rootfs_inode_unref(s);
	rootfs_tree_free(t);
}

int main(void)
{
	RUN(test_backup_groups);
	RUN(test_runs_skip_backups);
	RUN(test_sparse_runs);
	return test_done();
}
