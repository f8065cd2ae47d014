/* store.c — opening a data directory's storage: the backend table chosen
 * by the config (backend_fs.c: blobs/ALGO/XX/HEX written only whole, temp +
 * fsync + rename; backend_s3.c: the same keys in an S3 bucket), uploads/
 * where upload sessions stage, and meta.db beside it for administration. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry/internal.h"

int reg_store_open(reg_store *st, const struct reg_config *c, kiln_error **err)
{
	const char *root = c->data_dir;

	memset(st, 0, sizeof(*st));
	st->ops = c->s3_endpoint ? &reg_backend_s3 : &reg_backend_fs;
	st->root = kiln_xstrdup(root);
	st->blobs = kiln_path_join(root, "blobs");
	st->uploads = kiln_path_join(root, "uploads");
	/* The registry's blobs are what clients pushed: durable once acknowledged. */
	const struct kiln_cas_layout lay = { .fanout = true, .mode = 0644, .sync = KILN_CAS_SYNC_FULL, .tmp = st->uploads };
	if (kiln_mkdir_p(st->uploads, 0700, err) < 0 || (!c->s3_endpoint && kiln_cas_open(st->blobs, &lay, &st->cas, err) < 0)) {
		reg_store_close(st);
		return kiln_error_wrap(err, "blob store %s", root);
	}
	if (c->s3_endpoint) {
		st->pin_s = c->gc_pin_s;
		st->s3.endpoint = kiln_xstrdup(c->s3_endpoint);
		st->s3.region = kiln_xstrdup(c->s3_region ? c->s3_region : "us-east-1");
		st->s3.bucket = kiln_xstrdup(c->s3_bucket);
		st->s3.access_key = kiln_xstrdup(c->s3_access_key);
		st->s3.secret_key = kiln_xstrdup(c->s3_secret_key);
		if (reg_s3_create_bucket(&st->s3, err) < 0) {
			reg_store_close(st);
			return kiln_error_wrap(err, "blob store s3 %s/%s", c->s3_endpoint, c->s3_bucket);
		}
	}
	return 0;
}

void reg_store_close(reg_store *st)
{
	kiln_cas_close(st->cas);
	free(st->root);
	free(st->blobs);
	free(st->uploads);
	free(st->s3.endpoint);
	free(st->s3.region);
	free(st->s3.bucket);
	free(st->s3.access_key);
	free(st->s3.secret_key);
	memset(st, 0, sizeof(*st));
}

/* The digest must already be valid (kiln_digest_parse), which keeps the path
 * inside the store. */
char *reg_store_blob_path(const reg_store *st, const char *digest)
{
	return kiln_cas_path(st->cas, digest);
}

int reg_admin_open(struct reg_admin *a, const struct reg_config *c, kiln_error **err)
{
	a->db = NULL;
	if (reg_store_open(&a->st, c, err) < 0)
		return -1;
	a->db = reg_db_open_cfg(c, err);
	if (a->db == NULL) {
		reg_store_close(&a->st);
		return -1;
	}
	return 0;
}

void reg_admin_close(struct reg_admin *a)
{
	reg_db_close(a->db);
	reg_store_close(&a->st);
	a->db = NULL;
}
