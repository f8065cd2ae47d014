/* fuzz_layer.c — feed arbitrary bytes to the layer merge as one (possibly
 * compressed) layer tar applied over a small base layer: any input must give
 * a tree or a clean error, never a crash, leak or write outside the tree. */
#include <stdint.h>
#include <stdlib.h>

#include "rootfs/rootfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rootfs_limits lim;
	rootfs_tree *t;
	kiln_error *err = NULL;
	kiln_buf out = KILN_BUF_INIT;

	rootfs_limits_default(&lim);
	lim.max_entries = 20000;
	lim.max_bytes = 1ULL << 30;
	lim.max_file_size = 1ULL << 28;
	t = rootfs_tree_new(&lim);
	/* the same input twice: the second application exercises replacement,
	 * whiteouts and hardlinks against a populated tree */
	if (rootfs_tree_apply_buffer(t, 0, data, size, "fuzz", &err) == 0)
		rootfs_tree_apply_buffer(t, 1, data, size, "fuzz", &err);
	kiln_error_free(err);
	rootfs_tree_list(t, &out);
	kiln_buf_free(&out);
	rootfs_tree_free(t);
	return 0;
}
