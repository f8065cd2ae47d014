/* kernel.c — opening a guest kernel directory (filled by vm/fetch-kernel.sh;
 * which one: vm/locate.c) and resolving the modules init must load, with
 * their dependencies, from depmod's modules.dep. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vm/vm.h"

void vm_kernel_free(struct vm_kernel *k)
{
	free(k->dir);
	free(k->release);
	free(k->vmlinuz);
	free(k->image);
	free(k->modules);
	memset(k, 0, sizeof(*k));
}

int vm_kernel_open(const char *dir, struct vm_kernel *k, kiln_error **err)
{
	char *relpath = NULL, *data = NULL;
	size_t len = 0;
	struct stat st;
	int rc = -1;

	memset(k, 0, sizeof(*k));
	k->dir = dir ? kiln_xstrdup(dir) : vm_kernel_default_dir();
	if (k->dir == NULL) {
		vm_kernel_not_found(err);
		goto out;
	}
	relpath = kiln_path_join(k->dir, "release");
	if (stat(relpath, &st) < 0 && errno == ENOENT) {
		if (dir == NULL)
			vm_kernel_not_found(err);
		else
			kiln_err(err, KILN_E_NOTFOUND,
				 "no guest kernel in %s (run 'kiln vm kernel --fetch --dir %s' or vm/fetch-kernel.sh %s)",
				 k->dir, k->dir, k->dir);
		goto out;
	}
	if (kiln_read_file(relpath, &data, &len, 256, err) < 0)
		goto out;
	data[strcspn(data, "\r\n")] = '\0';
	if (data[0] == '\0' || strchr(data, '/') || strcmp(data, "..") == 0) {
		kiln_err(err, KILN_E_INVALID, "%s: bad kernel release '%s'", relpath, data);
		goto out;
	}
	k->release = data;
	data = NULL;
	k->vmlinuz = kiln_xasprintf("%s/root/boot/vmlinuz-%s", k->dir, k->release);
	k->modules = kiln_xasprintf("%s/root/lib/modules/%s", k->dir, k->release);
	if (stat(k->vmlinuz, &st) < 0 || !S_ISREG(st.st_mode)) {
		kiln_err(err, KILN_E_NOTFOUND, "guest kernel %s is missing (re-run vm/fetch-kernel.sh)", k->vmlinuz);
		goto out;
	}
	k->image = kiln_xasprintf("%s/root/boot/vmlinux-%s", k->dir, k->release);
	if (stat(k->image, &st) < 0 || !S_ISREG(st.st_mode)) {
		free(k->image);
		k->image = kiln_xstrdup(k->vmlinuz);
	}
	rc = 0;
out:
	free(relpath);
	free(data);
	if (rc < 0)
		vm_kernel_free(k);
	return rc;
}

/* One line of modules.dep: "kernel/x/a.ko: kernel/y/b.ko kernel/z/c.ko". */
struct moddep {
	char *path;
	kiln_strv deps;
};

static const char *mod_basename(const char *path, size_t *len)
{
	const char *b = strrchr(path, '/');
	size_t n;

	b = b ? b + 1 : path;
	n = strlen(b);
	if (n > 3 && strcmp(b + n - 3, ".ko") == 0)
		n -= 3;
	*len = n;
	return b;
}

/* Module names treat '-' and '_' alike (modprobe does the same). */
static bool modname_eq(const char *a, size_t alen, const char *b)
{
	if (alen != strlen(b))
		return false;
	for (size_t i = 0; i < alen; i++) {
		char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
		if (x != y)
			return false;
	}
	return true;
}

static struct moddep *find_by_name(struct moddep *m, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		size_t len;
		const char *b = mod_basename(m[i].path, &len);
		if (modname_eq(b, len, name))
			return &m[i];
	}
	return NULL;
}

static struct moddep *find_by_path(struct moddep *m, size_t n, const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(m[i].path, path) == 0)
			return &m[i];
	return NULL;
}

static bool strv_has(const kiln_strv *sv, const char *s)
{
	for (size_t i = 0; i < sv->n; i++)
		if (strcmp(sv->v[i], s) == 0)
			return true;
	return false;
}

/* Depth-first, dependencies before the module; depth bounds a cyclic file. */
static int add_module(struct moddep *all, size_t n, struct moddep *m, kiln_strv *out, int depth,
		      kiln_error **err)
{
	if (strv_has(out, m->path))
		return 0;
	if (depth > 64)
		return kiln_err(err, KILN_E_INVALID, "modules.dep: dependency cycle through %s", m->path);
	for (size_t i = 0; i < m->deps.n; i++) {
		struct moddep *d = find_by_path(all, n, m->deps.v[i]);
		if (d == NULL)
			return kiln_err(err, KILN_E_INVALID, "modules.dep: %s needs %s, which has no entry",
					m->path, m->deps.v[i]);
		if (add_module(all, n, d, out, depth + 1, err) < 0)
			return -1;
	}
	kiln_strv_push(out, m->path);
	return 0;
}

/* A kernel built with the driver inside (=y) lists it in modules.builtin. */
static bool builtin_has(const struct vm_kernel *k, const char *name)
{
	char *path = kiln_path_join(k->modules, "modules.builtin"), *data = NULL, *line, *save = NULL;
	kiln_error *err = NULL;
	bool found = false;
	size_t len;

	if (kiln_read_file(path, &data, &len, 16u << 20, &err) < 0) {
		kiln_error_free(err);
		free(path);
		return false;
	}
	for (line = strtok_r(data, "\n", &save); line && !found; line = strtok_r(NULL, "\n", &save)) {
		const char *b = mod_basename(line, &len);
		found = modname_eq(b, len, name);
	}
	free(data);
	free(path);
	return found;
}

int vm_kernel_resolve_modules(const struct vm_kernel *k, const char *const *names, kiln_strv *out,
			      kiln_error **err)
{
	char *path = kiln_path_join(k->modules, "modules.dep"), *data = NULL, *line, *save = NULL;
	struct moddep *mods = NULL;
	size_t n = 0, cap = 0, len, lineno = 0;
	int rc = -1;

	if (kiln_read_file(path, &data, &len, 64u << 20, err) < 0) {
		kiln_error_wrap(err, "guest kernel modules");
		goto out;
	}
	for (line = strtok_r(data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':'), *tok, *s2 = NULL;
		lineno++;
		if (colon == NULL || colon == line) {
			kiln_err(err, KILN_E_INVALID, "%s:%zu: expected 'module.ko: deps...'", path, lineno);
			goto out;
		}
		*colon = '\0';
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			mods = kiln_xrealloc(mods, cap * sizeof(*mods));
		}
		mods[n].path = kiln_xstrdup(line);
		memset(&mods[n].deps, 0, sizeof(mods[n].deps));
		for (tok = strtok_r(colon + 1, " \t", &s2); tok; tok = strtok_r(NULL, " \t", &s2))
			kiln_strv_push(&mods[n].deps, tok);
		n++;
	}
	for (size_t i = 0; names[i]; i++) {
		struct moddep *m = find_by_name(mods, n, names[i]);
		if (m == NULL && builtin_has(k, names[i]))
			continue;
		if (m == NULL) {
			kiln_err(err, KILN_E_NOTFOUND, "guest kernel %s has no module %s", k->release, names[i]);
			goto out;
		}
		if (add_module(mods, n, m, out, 0, err) < 0)
			goto out;
	}
	rc = 0;
out:
	for (size_t i = 0; i < n; i++) {
		free(mods[i].path);
		kiln_strv_free(&mods[i].deps);
	}
	free(mods);
	free(data);
	free(path);
	return rc;
}
