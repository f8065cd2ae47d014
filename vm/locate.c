/* locate.c — where kiln finds its own guest files (the kernel, the agent, the
 * kernel fetch script): in its installation (PREFIX/lib/kiln beside
 * PREFIX/bin/kiln) or in the checkout it was built in (bin/, build/, vm/),
 * found from /proc/self/exe so a tree copied under DESTDIR finds its own. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vm/vm.h"

/* The folder above the running binary's (PREFIX for PREFIX/bin/kiln, the
 * checkout for CHECKOUT/bin/kiln; "" for /bin/kiln), or NULL. */
static char *self_top(void)
{
	char self[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return NULL;
	self[n] = '\0';
	for (int up = 0; up < 2; up++) {
		slash = strrchr(self, '/');
		if (slash == NULL)
			return NULL;
		*slash = '\0';
	}
	return kiln_xstrdup(self);
}

/* The two places an own file can be: TOP/lib/kiln/NAME, TOP/IN_TREE. */
static void own_candidates(const char *name, const char *in_tree, kiln_strv *out)
{
	char *top = self_top();

	if (top == NULL)
		return;
	kiln_strv_push_owned(out, kiln_xasprintf("%s/lib/kiln/%s", top, name));
	kiln_strv_push_owned(out, kiln_xasprintf("%s/%s", top, in_tree));
	free(top);
}

char *vm_own_file(const char *name, const char *in_tree)
{
	kiln_strv c = { 0 };
	char *found = NULL;

	own_candidates(name, in_tree, &c);
	for (size_t i = 0; i < c.n && found == NULL; i++)
		if (access(c.v[i], F_OK) == 0)
			found = kiln_xstrdup(c.v[i]);
	kiln_strv_free(&c);
	return found;
}

char *vm_agent_default_path(void)
{
	const char *env = getenv("KILN_AGENT");
	kiln_strv c = { 0 };
	char *p;

	if (env && *env)
		return kiln_xstrdup(env);
	p = vm_own_file("kiln-agent", "bin/kiln-agent");
	if (p)
		return p;
	own_candidates("kiln-agent", "bin/kiln-agent", &c);
	p = kiln_xstrdup(c.n ? c.v[0] : "kiln-agent");
	kiln_strv_free(&c);
	return p;
}

/* $KILN_KERNEL, or the older name $KILN_KERNEL_DIR; NULL when neither is set. */
static const char *kernel_env(const char **name)
{
	const char *v = getenv("KILN_KERNEL");

	*name = "KILN_KERNEL";
	if (v && *v)
		return v;
	v = getenv("KILN_KERNEL_DIR");
	*name = "KILN_KERNEL_DIR";
	return v && *v ? v : NULL;
}

void vm_kernel_search_path(kiln_strv *out)
{
	const char *name, *env = kernel_env(&name);

	if (env) {
		kiln_strv_push(out, env);
		return;
	}
	kiln_strv_push_owned(out, kiln_home_path(NULL, KILN_PATH_KERNEL, NULL));
	own_candidates("kernel", "build/kernel", out);
}

char *vm_kernel_user_dir(void)
{
	const char *name, *env = kernel_env(&name);

	if (env)
		return kiln_xstrdup(env);
	return kiln_home_path(NULL, KILN_PATH_KERNEL, NULL);
}

char *vm_kernel_default_dir(void)
{
	kiln_strv c = { 0 };
	char *found = NULL;
	struct stat st;

	vm_kernel_search_path(&c);
	for (size_t i = 0; i < c.n && found == NULL; i++) {
		char *rel = kiln_path_join(c.v[i], "release");
		if (stat(rel, &st) == 0 && S_ISREG(st.st_mode))
			found = kiln_xstrdup(c.v[i]);
		free(rel);
	}
	kiln_strv_free(&c);
	return found;
}

int vm_kernel_not_found(kiln_error **err)
{
	const char *name, *env = kernel_env(&name);
	kiln_strv c = { 0 };
	kiln_buf b = KILN_BUF_INIT;
	char *user = vm_kernel_user_dir();
	int rc;

	vm_kernel_search_path(&c);
	for (size_t i = 0; i < c.n; i++)
		kiln_buf_addf(&b, "%s%s", i ? ", " : "", c.v[i]);
	if (env)
		rc = kiln_err(err, KILN_E_NOTFOUND,
			      "no guest kernel in %s (set by $%s; unset it to use the installed kernel, or run "
			      "'kiln vm kernel --fetch' to put one there)",
			      env, name);
	else
		rc = kiln_err(err, KILN_E_NOTFOUND,
			      "no guest kernel found; looked in %s (install kiln with its kernel, set $KILN_KERNEL, "
			      "or run 'kiln vm kernel --fetch' to put one in %s)",
			      b.len ? b.buf : "(nowhere)", user);
	kiln_buf_free(&b);
	kiln_strv_free(&c);
	free(user);
	return rc;
}
