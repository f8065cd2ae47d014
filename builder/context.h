/* context.h — the build context as kiln build and its remote client see it:
 * .dockerignore and COPY --exclude patterns, and a directory walked through
 * them; no VM, no store (remote/ lists a context with these). */
#ifndef KILN_BUILDER_CONTEXT_H
#define KILN_BUILDER_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "kiln.h"

/* ===========================================================================
 * Patterns (ignore.c): .dockerignore and COPY --exclude, as moby's
 * ignorefile.ReadAll + patternmatcher.MatchesOrParentMatches.
 * ========================================================================= */
typedef struct build_ignore build_ignore;

/* Patterns as patternmatcher.New takes them ("!" marks an exception);
 * `where` names them in errors. */
int build_ignore_new(const char *const *patterns, size_t n, const char *where, build_ignore **out,
		     kiln_error **err);
/* .dockerignore text: comments, BOM, trimming, cleaning, leading "/" dropped. */
int build_ignore_parse(const char *text, size_t len, const char *where, build_ignore **out, kiln_error **err);
/* Load a .dockerignore file; a missing file gives an empty matcher. */
int build_ignore_load(const char *path, build_ignore **out, kiln_error **err);
/* Is this slash-separated, cleaned, context-relative path excluded? */
bool build_ignore_match(const build_ignore *ig, const char *path);
bool build_ignore_has_exclusions(const build_ignore *ig);
size_t build_ignore_count(const build_ignore *ig);
void build_ignore_free(build_ignore *ig);

/* Go's filepath.Match: '*' and '?' never match '/', classes "[a-z]"
 * "[^a]", backslash escapes.  Returns -1 for a malformed pattern. */
int build_glob_match(const char *pattern, const char *name);
/* Does the string contain glob metacharacters (* ? [ or an escape)? */
bool build_glob_has_meta(const char *s);

/* ===========================================================================
 * Source trees (tree.c): a directory on disk seen through an ignore matcher,
 * listed once (lstat, symlinks never followed), sorted by path.
 * ========================================================================= */
struct build_entry {
	char *path;    /* relative, cleaned, "/"-separated ("a/b"); the root is not listed */
	struct stat st;
	char *link;    /* symlink target, else NULL */
};

typedef struct build_tree build_tree;

/* List `root` (a directory), leaving out what `ig` excludes (ig may be NULL).
 * Excluded directories are still entered when exceptions ("!") exist, and a
 * directory is listed if it is included or holds something included. */
int build_tree_open(const char *root, const build_ignore *ig, build_tree **out, kiln_error **err);
void build_tree_free(build_tree *t);
const char *build_tree_root(const build_tree *t);
size_t build_tree_count(const build_tree *t);
const struct build_entry *build_tree_entry(const build_tree *t, size_t i);
/* The entry for a cleaned relative path, or NULL ("." has no entry). */
const struct build_entry *build_tree_find(const build_tree *t, const char *path);
/* Index range [*begin, *end) of the entries strictly below `dir` ("." = all). */
void build_tree_children(const build_tree *t, const char *dir, size_t *begin, size_t *end);

#endif
