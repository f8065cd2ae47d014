/* test_build_ignore.c — .dockerignore semantics against moby's patternmatcher
 * and ignorefile tables, filepath.Clean/Match, and the context walk. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "builder/builder.h"
#include "test.h"

static int match1(const char *pattern, const char *path)
{
	build_ignore *ig = NULL;
	kiln_error *err = NULL;
	const char *p[] = { pattern };
	int m;

	if (build_ignore_new(p, 1, "test", &ig, &err) < 0) {
		kiln_error_free(err);
		return -1;
	}
	m = build_ignore_match(ig, path);
	build_ignore_free(ig);
	return m;
}

static void test_patterns(void)
{
	static const struct {
		const char *pat, *path;
		int want;
	} t[] = {
		{ "**", "file", 1 }, { "**", "file/", 1 }, { "**/", "file", 1 }, { "**", "dir/file", 1 },
		{ "**/", "dir/file", 1 }, { "dir/**", "dir/file", 1 }, { "dir/**", "dir/dir2/file", 1 },
		{ "**/file", "file", 1 }, { "**/file", "dir/file", 1 }, { "**/file", "dir/dir/file", 1 },
		{ "**/file*", "file", 1 }, { "**/file*", "dir/dir/file.txt", 1 },
		{ "**/file*txt", "dir/dir/file.txt", 1 }, { "**/file*.txt", "dir/dir/file.txt", 1 },
		{ "**/**/*.txt", "dir/dir/file.txt", 1 }, { "**/**/*.txt2", "dir/dir/file.txt", 0 },
		{ "**/*.txt", "file.txt", 1 }, { "**/**/*.txt", "file.txt", 1 },
		{ "a**/*.txt", "a/file.txt", 1 }, { "a**/*.txt", "a/dir/file.txt", 1 },
		{ "a**/*.txt", "a/dir/dir/file.txt", 1 }, { "a/*.txt", "a/dir/file.txt", 0 },
		{ "a/*.txt", "a/file.txt", 1 }, { "a/*.txt**", "a/file.txt", 1 },
		{ "a[b-d]e", "ae", 0 }, { "a[b-d]e", "ace", 1 }, { "a[b-d]e", "aae", 0 },
		{ "a[^b-d]e", "aze", 1 }, { ".*", ".foo", 1 }, { ".*", "foo", 0 },
		{ "abc.def", "abcdef", 0 }, { "abc.def", "abc.def", 1 }, { "abc.def", "abcZdef", 0 },
		{ "abc?def", "abcZdef", 1 }, { "abc?def", "abcdef", 0 }, { "a\\\\", "a\\", 1 },
		{ "**/foo/bar", "foo/bar", 1 }, { "**/foo/bar", "dir/foo/bar", 1 },
		{ "**/foo/bar", "dir/dir2/foo/bar", 1 }, { "abc/**", "abc", 0 }, { "abc/**", "abc/def", 1 },
		{ "abc/**", "abc/def/ghi", 1 }, { "**/.foo", ".foo", 1 }, { "**/.foo", "bar.foo", 0 },
		{ "a(b)c/def", "a(b)c/def", 1 }, { "a(b)c/def", "a(b)c/xyz", 0 },
		{ "a.|)$(}+{bc", "a.|)$(}+{bc", 1 },
		{ "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl",
		  "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", 1 },
		{ "dist/*.whl", "dist/proxy.py-2.4.0rc3.dev36+g08acad9-py3-none-any.whl", 1 },
		/* parents match: an excluded directory excludes what is below it */
		{ "dir", "dir/a/b", 1 }, { "dir/*", "dir/a/b", 1 }, { "*", "a/b", 1 },
		{ "a/b", "a", 0 }, { "*.log", "a/x.log", 0 }, { "./dir/../x", "x", 1 }, { "x/", "x/y", 1 },
		/* the suffix fast path is literal: "**foo" matches "xfoo" */
		{ "**foo", "a/xfoo", 1 }, { "?", "é", 1 }, { "??", "é", 0 },
		/* malformed patterns */
		{ "a[", "a", -1 }, { "[]a]", "a", -1 }, { "a\\", "a", -1 }, { "!", "a", -1 },
		{ "[a-]", "a", -1 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		int got = match1(t[i].pat, t[i].path);
		if (got != t[i].want)
			printf("#   pattern '%s' path '%s': got %d want %d\n", t[i].pat, t[i].path, got, t[i].want);
		CHECK_INT(got, t[i].want);
	}
}

static int file_match(const char *text, const char *path)
{
	build_ignore *ig = NULL;
	kiln_error *err = NULL;
	int m;

	if (build_ignore_parse(text, strlen(text), ".dockerignore", &ig, &err) < 0) {
		kiln_error_free(err);
		return -1;
	}
	m = build_ignore_match(ig, path);
	build_ignore_free(ig);
	return m;
}

static void test_file(void)
{
	const char *f = "\xEF\xBB\xBF# comment\n  \n/docs\n!docs/README.md\n*.md\n!README.md\n#x\n  tmp/  \r\n";

	CHECK_INT(file_match(f, "docs/other"), 1);
	CHECK_INT(file_match(f, "docs/README.md"), 0); /* "*.md" does not reach into docs/ */
	CHECK_INT(file_match(f, "a.md"), 1);
	CHECK_INT(file_match(f, "README.md"), 0);
	CHECK_INT(file_match(f, "x.md"), 1);
	CHECK_INT(file_match(f, "tmp/a"), 1);
	CHECK_INT(file_match(f, "#x"), 0);
	CHECK_INT(file_match(f, "comment"), 0);
	CHECK_INT(file_match("docs\n!docs/README.md\n", "docs/README.md"), 0);
	CHECK_INT(file_match("docs\n!docs/README.md\n", "docs/a"), 1);
	CHECK_INT(file_match("! /x\n", "x"), 0);
	CHECK_INT(file_match("*\n! keep\n", "keep"), 0);
	CHECK_INT(file_match("*\n!keep\n", "other"), 1);
	CHECK_INT(file_match("/\n", "a"), 0);
	CHECK_INT(file_match(" # not a comment\n", "# not a comment"), 1);
	CHECK_INT(file_match("!\n", "a"), -1);
	CHECK_INT(file_match("a\n", "."), 0);
}

static void test_clean(void)
{
	static const char *t[][2] = {
		{ "", "." }, { "abc", "abc" }, { "abc/def/", "abc/def" }, { "a//b", "a/b" },
		{ "./a", "a" }, { "a/./b", "a/b" }, { "a/../b", "b" }, { "../a", "../a" },
		{ "../../a/..", "../.." }, { "/../a", "/a" }, { "/", "/" }, { "//a//", "/a" },
		{ "a/b/../../..", ".." }, { "abc/def/../../..", ".." }, { "/abc/..", "/" },
		{ ".", "." }, { "..", ".." }, { "a/..", "." },
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char *c = kiln_path_clean(t[i][0]);
		CHECK_STR(c, t[i][1]);
		free(c);
	}
}

static void test_glob(void)
{
	CHECK_INT(build_glob_match("*.txt", "a.txt"), 1);
	CHECK_INT(build_glob_match("*.txt", "d/a.txt"), 0);
	CHECK_INT(build_glob_match("d/*", "d/a.txt"), 1);
	CHECK_INT(build_glob_match("?", "ab"), 0);
	CHECK_INT(build_glob_match("[a-c]x", "bx"), 1);
	CHECK_INT(build_glob_match("[^a-c]x", "bx"), 0);
	CHECK_INT(build_glob_match("\\*", "*"), 1);
	CHECK_INT(build_glob_match("\\*", "a"), 0);
	CHECK_INT(build_glob_match("a[", "a"), -1);
	CHECK(build_glob_has_meta("a*"));
	CHECK(!build_glob_has_meta("a.b"));
}

static void put(const char *dir, const char *rel, const char *content)
{
	char *p = kiln_path_join(dir, rel);
	kiln_error *err = NULL;
	if (kiln_write_atomic(p, content, strlen(content), 0644, &err) < 0) {
		printf("#   %s\n", kiln_error_message(err));
		kiln_error_free(err);
	}
	free(p);
}

static void test_tree(void)
{
	kiln_error *err = NULL;
	char *dir = kiln_mkdtemp("kiln-test-tree", &err);
	build_ignore *ig = NULL;
	build_tree *t = NULL;
	kiln_buf list = KILN_BUF_INIT;
	char *sub;

	CHECK(dir != NULL);
	if (!dir)
		return;
	sub = kiln_path_join(dir, "a/b");
	kiln_mkdir_p(sub, 0755, &err);
	free(sub);
	sub = kiln_path_join(dir, "skip/keep");
	kiln_mkdir_p(sub, 0755, &err);
	free(sub);
	sub = kiln_path_join(dir, "gone");
	kiln_mkdir_p(sub, 0755, &err);
	free(sub);
	put(dir, "a/b/c.txt", "c");
	put(dir, "a/x.log", "x");
	put(dir, "a.b", "ab");
	put(dir, "skip/keep/k", "k");
	put(dir, "skip/no", "n");
	put(dir, "gone/f", "f");
	sub = kiln_path_join(dir, "link");
	CHECK(symlink("/etc/passwd", sub) == 0);
	free(sub);
	const char *ign = "**/*.log\nskip\n!skip/keep\ngone\n";
	CHECK(build_ignore_parse(ign, strlen(ign), "t", &ig, &err) == 0);
	CHECK(build_tree_open(dir, ig, &t, &err) == 0);
	if (t) {
		for (size_t i = 0; i < build_tree_count(t); i++) {
			const struct build_entry *e = build_tree_entry(t, i);
			kiln_buf_addf(&list, "%s%s ", e->path, e->link ? "@" : "");
		}
		CHECK_STR(list.buf, "a a.b a/b a/b/c.txt link@ skip skip/keep skip/keep/k ");
		CHECK(build_tree_find(t, "a/b") != NULL);
		CHECK(build_tree_find(t, "a/x.log") == NULL);
		size_t b, e;
		build_tree_children(t, "a", &b, &e);
		CHECK_INT(e - b, 2);
		build_tree_children(t, ".", &b, &e);
		CHECK_INT(e - b, build_tree_count(t));
	}
	build_tree_free(t);
	build_ignore_free(ig);
	kiln_buf_free(&list);
	kiln_error_clear(&err);
	kiln_rm_rf(dir, &err);
	free(dir);
}

int main(void)
{
	RUN(test_patterns);
	RUN(test_file);
	RUN(test_clean);
	RUN(test_glob);
	RUN(test_tree);
	return test_done();
}
