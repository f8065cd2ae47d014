/* error.c — kiln's one error type: a kind, an errno and a chain of context
 * frames, outermost first.  Libraries create and wrap errors; only the CLI
 * prints them, as one line joined with ": ". */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static kiln_error_frame *frame_new(const char *fmt, va_list ap)
{
	kiln_error_frame *f = kiln_xcalloc(1, sizeof(*f));
	kiln_buf b = KILN_BUF_INIT;

	kiln_buf_vaddf(&b, fmt, ap);
	f->msg = kiln_buf_detach(&b);
	return f;
}

static int err_new(kiln_error **err, enum kiln_errkind kind, int errnum, const char *fmt, va_list ap)
{
	kiln_error *e;

	if (err == NULL)
		return -1;
	/* An error that is already set keeps its cause: the new text becomes context. */
	if (*err != NULL) {
		kiln_error_frame *f = frame_new(fmt, ap);
		f->cause = (*err)->top;
		(*err)->top = f;
		return -1;
	}
	e = kiln_xcalloc(1, sizeof(*e));
	e->kind = kind;
	e->errnum = errnum;
	e->top = frame_new(fmt, ap);
	if (errnum != 0) {
		char *with = kiln_xasprintf("%s: %s", e->top->msg, strerror(errnum));
		free(e->top->msg);
		e->top->msg = with;
	}
	*err = e;
	return -1;
}

int kiln_err(kiln_error **err, enum kiln_errkind kind, const char *fmt, ...)
{
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = err_new(err, kind, 0, fmt, ap);
	va_end(ap);
	return ret;
}

int kiln_err_errno(kiln_error **err, int errnum, const char *fmt, ...)
{
	enum kiln_errkind kind = errnum == ENOENT ? KILN_E_NOTFOUND : errnum == EEXIST ? KILN_E_EXISTS : KILN_E_IO;
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = err_new(err, kind, errnum, fmt, ap);
	va_end(ap);
	return ret;
}

int kiln_error_disk_full(const kiln_error *err)
{
	return err != NULL && (err->errnum == ENOSPC || err->errnum == EDQUOT);
}

int kiln_error_wrap(kiln_error **err, const char *fmt, ...)
{
	kiln_error_frame *f;
	va_list ap;

	if (err == NULL || *err == NULL)
		return -1;
	va_start(ap, fmt);
	f = frame_new(fmt, ap);
	va_end(ap);
	f->cause = (*err)->top;
	(*err)->top = f;
	return -1;
}

const char *kiln_error_message(kiln_error *err)
{
	kiln_buf b = KILN_BUF_INIT;

	if (err == NULL || err->top == NULL)
		return "unknown error";
	for (kiln_error_frame *f = err->top; f != NULL; f = f->cause) {
		if (b.len > 0)
			kiln_buf_adds(&b, ": ");
		kiln_buf_adds(&b, f->msg);
	}
	/* Rebuilt on every call: a wrap after an earlier call must show up. */
	free(err->joined);
	err->joined = kiln_buf_detach(&b);
	return err->joined;
}

const char *kiln_error_cause(const kiln_error *err)
{
	const kiln_error_frame *f;

	if (err == NULL || err->top == NULL)
		return "unknown error";
	for (f = err->top; f->cause != NULL; f = f->cause)
		;
	return f->msg;
}

void kiln_error_free(kiln_error *err)
{
	kiln_error_frame *f, *next;

	if (err == NULL)
		return;
	for (f = err->top; f != NULL; f = next) {
		next = f->cause;
		free(f->msg);
		free(f);
	}
	free(err->joined);
	free(err);
}

void kiln_error_clear(kiln_error **err)
{
	if (err == NULL)
		return;
	kiln_error_free(*err);
	*err = NULL;
}
