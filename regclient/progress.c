/* progress.c — a transfer's progress for people and programs: one line
 * ("3/5 blobs (1 present), 12.0/40.0 MiB, 5.1 MiB/s, ETA 6s") or a JSON object. */
#include "regclient/internal.h"

static void add_size(kiln_buf *b, double v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;
	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	kiln_buf_addf(b, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

void rc_progress_format(const struct rc_progress *p, double elapsed_s, kiln_buf *out)
{
	double rate = elapsed_s > 0 ? (double)p->bytes_moved / elapsed_s : 0;

	kiln_buf_addf(out, "%zu/%zu blobs", p->blobs_done, p->blobs_total);
	if (p->blobs_skipped)
		kiln_buf_addf(out, " (%zu present)", p->blobs_skipped);
	kiln_buf_adds(out, ", ");
	add_size(out, (double)p->bytes_done);
	kiln_buf_adds(out, "/");
	add_size(out, (double)p->bytes_total);
	kiln_buf_adds(out, ", ");
	add_size(out, rate);
	kiln_buf_adds(out, "/s");
	if (rate > 0 && p->bytes_done < p->bytes_total)
		kiln_buf_addf(out, ", ETA %.0fs", (double)(p->bytes_total - p->bytes_done) / rate);
}

json_t *rc_progress_json(const struct rc_progress *p, double elapsed_s)
{
	json_t *j = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "blobs_done", (json_int_t)p->blobs_done,
			      "blobs_total", (json_int_t)p->blobs_total, "blobs_skipped", (json_int_t)p->blobs_skipped,
			      "bytes_done", (json_int_t)p->bytes_done, "bytes_total", (json_int_t)p->bytes_total,
			      "bytes_moved", (json_int_t)p->bytes_moved, "seconds", elapsed_s);
	if (p->digest)
		json_object_set_new(j, "digest", json_string(p->digest));
	return j;
}
