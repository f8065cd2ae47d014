/* tar.c — the one way kiln opens tar streams with libarchive, so that file
 * names are bytes: kiln runs in the C locale, where libarchive would refuse
 * to write a non-ASCII name ("Can't translate pathname") and warns on reading
 * one.  Here a name that is UTF-8 goes into a plain PAX record, as Go's
 * archive/tar (BuildKit, buildah) writes it; any other name is written raw
 * under POSIX's `hdrcharset=BINARY`.  Readers keep the raw bytes. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <locale.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

struct archive *kiln_tar_writer_new(void)
{
	struct archive *a = archive_write_new();
	locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
	int r = ARCHIVE_FATAL;

	archive_write_set_format_pax_restricted(a);
	if (utf8 != (locale_t)0) {
		/* The name converter is made (and kept) while the thread's charset is
		 * UTF-8: UTF-8 names pass through unchanged, other bytes fall back to
		 * binary for that entry (kiln_tar_write_header takes that warning). */
		locale_t old = uselocale(utf8);
		r = archive_write_set_format_option(a, "pax", "hdrcharset", "UTF-8");
		uselocale(old);
		freelocale(utf8);
	}
	if (r != ARCHIVE_OK)
		archive_write_set_format_option(a, "pax", "hdrcharset", "BINARY");
	/* xattrs as SCHILY.xattr.NAME records only, as Go's archive/tar (buildah) writes them */
	archive_write_set_format_option(a, "pax", "xattrheader", "SCHILY");
	return a;
}

int kiln_tar_write_header(struct archive *w, struct archive_entry *e)
{
	int r = archive_write_header(w, e);

	/* ARCHIVE_WARN: a name that is not UTF-8, written as bytes (hdrcharset=BINARY) */
	return r == ARCHIVE_WARN ? ARCHIVE_OK : r;
}

struct archive *kiln_tar_reader_new(void)
{
	struct archive *a = archive_read_new();

	archive_read_support_format_tar(a);
	/* built-in decoders only: none of libarchive's external-program fallbacks */
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	archive_read_support_filter_bzip2(a);
	archive_read_support_filter_xz(a);
	return a;
}

int kiln_tar_next(struct archive *a, struct archive_entry **e)
{
	int r = archive_read_next_header(a, e);

	/* ARCHIVE_WARN: a name not convertible to the C locale (kept as its raw
	 * bytes), or a damaged PAX record libarchive skipped; the entry is whole. */
	if (r == ARCHIVE_WARN)
		r = archive_entry_pathname(*e) ? ARCHIVE_OK : ARCHIVE_FAILED;
	return r;
}

int kiln_tar_err(kiln_error **err, enum kiln_errkind kind, struct archive *a, const char *fmt, ...)
{
	const char *what = archive_error_string(a);
	int errnum = archive_errno(a);
	kiln_buf msg = KILN_BUF_INIT;
	va_list ap;

	va_start(ap, fmt);
	kiln_buf_vaddf(&msg, fmt, ap);
	va_end(ap);
	/* libarchive's own codes on Linux are -1 (misc), EILSEQ (format) and
	 * EINVAL (usage): they say nothing its message does not */
	if (errnum > 0 && errnum != EILSEQ && errnum != EINVAL && (what == NULL || strstr(what, strerror(errnum)) == NULL))
		kiln_err_errno(err, errnum, "%s: %s", msg.buf, what ? what : "error");
	else
		kiln_err(err, kind, "%s: %s", msg.buf, what ? what : "error");
	kiln_buf_free(&msg);
	return -1;
}
