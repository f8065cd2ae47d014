/* sandbox_files.c — `kiln sandbox cp`: a file or a tree between the host and
 * a running sandbox as a tar stream through the agent (common/tar.c on the
 * host: names as bytes, numeric owners; the guest's tar extracts with owners
 * and modes).  Destinations follow cp: an existing directory receives the
 * source under its own name, anything else is the new name. */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "snapshots/internal.h"

#define XFER_TIMEOUT_MS (30 * 60 * 1000)

/* path without trailing slashes ("/" stays "/"); absolute for the guest. */
static char *trimmed(const char *path, bool guest)
{
	char *p = guest && path[0] != '/' ? kiln_xasprintf("/%s", path) : kiln_xstrdup(path);
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		p[--n] = '\0';
	return p;
}

static char *dir_of(const char *path)
{
	char *c = kiln_xstrdup(path), *d = kiln_xstrdup(dirname(c));

	free(c);
	return d;
}

static char *base_of(const char *path)
{
	char *c = kiln_xstrdup(path), *b = kiln_xstrdup(basename(c));

	free(c);
	return b;
}

static bool bad_name(const char *name)
{
	return *name == '\0' || strcmp(name, "/") == 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

int snap_sandbox_cp_in(const char *id, const char *host_path, const char *guest_path, kiln_error **err)
{
	guest_conn *c = NULL;
	struct guest_stat gs = { 0 };
	struct stat hs;
	char *src = NULL, *real = NULL, *dst = NULL, *gdir = NULL, *name = NULL;
	bool into, slash = guest_path[0] && guest_path[strlen(guest_path) - 1] == '/';
	int rc = -1;

	if (lstat(host_path, &hs) < 0) {
		kiln_err_errno(err, errno, "%s", host_path);
		goto out;
	}
	src = trimmed(host_path, false);
	/* the name a source like "." or "dir/.." stands for */
	real = realpath(src, NULL);
	if ((c = snap_sandbox_connect(id, 10000, err)) == NULL)
		goto out;
	dst = trimmed(guest_path, true);
	into = slash || strcmp(dst, "/") == 0;
	if (!into) {
		kiln_error *e = NULL;
		if (guest_stat_path(c, dst, GUEST_STAT_FOLLOW, &gs, 10000, &e) == 0)
			into = S_ISDIR(gs.mode);
		else if (e->kind != KILN_E_NOTFOUND) {
			*err = e;
			goto out;
		}
		kiln_error_free(e);
	}
	if (into) {
		gdir = kiln_xstrdup(dst);
		name = base_of(S_ISLNK(hs.st_mode) || real == NULL ? src : real);
	} else {
		gdir = dir_of(dst);
		name = base_of(dst);
	}
	if (bad_name(name)) {
		kiln_err(err, KILN_E_USAGE, "cannot tell what to name %s in the sandbox", host_path);
		goto out;
	}
	rc = guest_upload_entry(c, src, gdir, name, XFER_TIMEOUT_MS, err);
out:
	if (rc < 0)
		kiln_error_wrap(err, "copying %s to %s:%s", host_path, id, guest_path);
	guest_stat_free(&gs);
	guest_close(c);
	free(src);
	free(real);
	free(dst);
	free(gdir);
	free(name);
	return rc;
}

int snap_sandbox_cp_out(const char *id, const char *guest_path, const char *host_path, kiln_error **err)
{
	guest_conn *c = NULL;
	struct stat hs;
	char *src = trimmed(guest_path, true), *gdir = dir_of(src), *name = base_of(src);
	char *dst = trimmed(host_path, false), *hdir = NULL, *hname = NULL;
	bool into = host_path[0] && host_path[strlen(host_path) - 1] == '/';
	int rc = -1;

	if (bad_name(name)) {
		kiln_err(err, KILN_E_USAGE, "name a file or directory in the sandbox, not %s", guest_path);
		goto out;
	}
	if (!into && stat(dst, &hs) == 0 && S_ISDIR(hs.st_mode))
		into = true;
	if (into) {
		hdir = kiln_xstrdup(dst);
		hname = kiln_xstrdup(name);
	} else {
		hdir = dir_of(dst);
		hname = base_of(dst);
	}
	if (bad_name(hname)) {
		kiln_err(err, KILN_E_USAGE, "cannot tell what to name %s on the host", guest_path);
		goto out;
	}
	if ((c = snap_sandbox_connect(id, 10000, err)) == NULL)
		goto out;
	rc = guest_download_entry(c, gdir, name, hdir, hname, XFER_TIMEOUT_MS, err);
out:
	if (rc < 0)
		kiln_error_wrap(err, "copying %s:%s to %s", id, guest_path, host_path);
	guest_close(c);
	free(src);
	free(gdir);
	free(name);
	free(dst);
	free(hdir);
	free(hname);
	return rc;
}
