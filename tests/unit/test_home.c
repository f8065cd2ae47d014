/* test_home.c — the $KILN_HOME path table (common/home.c): paths are built
 * from it, and docs/ARCHITECTURE.md's store listing says what it holds, entry
 * for entry and in its order, so the doc and the code cannot drift apart. */
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test.h"

static void test_paths(void)
{
	char *p = kiln_home_path("/h", KILN_PATH_CACHE, "%s.json", "ab");
	CHECK_STR(p, "/h/cache/ab.json");
	free(p);
	p = kiln_home_path("/h/", KILN_PATH_SNAP_REFS, NULL);
	CHECK_STR(p, "/h/snapshots/refs");
	free(p);
	setenv("KILN_HOME", "/k", 1);
	p = kiln_home_path(NULL, KILN_PATH_AUTH, NULL);
	CHECK_STR(p, "/k/auth.json");
	free(p);
	for (int i = 0; i < KILN_PATH_N_; i++)
		CHECK(kiln_path_table[i].path != NULL);
}

/* The listing is the code block after "### Local store"; an entry is a line
 * that does not start with a space, its first word the path as the table's
 * doc names it. */
static void test_doc_listing(void)
{
	char *text = NULL, *block, *end;
	size_t len = 0;
	int want = 0;

	CHECK(kiln_read_file("docs/ARCHITECTURE.md", &text, &len, 0, NULL) == 0);
	if (!text)
		return;
	block = strstr(text, "### Local store");
	CHECK(block && (block = strstr(block, "```\n")) != NULL);
	if (!block || !(end = strstr(block + 4, "```"))) {
		free(text);
		return;
	}
	block += 4;
	*end = '\0';
	for (char *line = block; line < end && *line;) {
		char *nl = strchr(line, '\n'), *sp;
		if (nl)
			*nl = '\0';
		if (*line && *line != ' ') {
			sp = line + strcspn(line, " ");
			*sp = '\0';
			while (want < KILN_PATH_N_ && kiln_path_table[want].doc == NULL)
				want++;
			if (want >= KILN_PATH_N_) {
				printf("#   the listing has %s, the table nothing more\n", line);
				CHECK(!"listing longer than the table");
			} else {
				CHECK_STR(line, kiln_path_table[want].doc);
				want++;
			}
			if (sp < (nl ? nl : end))
				*sp = ' ';
		}
		if (!nl)
			break;
		*nl = '\n';
		line = nl + 1;
	}
	while (want < KILN_PATH_N_ && kiln_path_table[want].doc == NULL)
		want++;
	if (want < KILN_PATH_N_)
		printf("#   the table's %s is not in the listing\n", kiln_path_table[want].doc);
	CHECK(want == KILN_PATH_N_);
	/* the entries without a line of their own are named in the listing */
	for (int i = 0; i < KILN_PATH_N_; i++)
		if (kiln_path_table[i].doc == NULL && strstr(block, kiln_path_table[i].path) == NULL) {
			printf("#   %s is not named in the listing\n", kiln_path_table[i].path);
			CHECK(!"entry not in the listing");
		}
	free(text);
}

int main(void)
{
	RUN(test_paths);
	RUN(test_doc_listing);
	return test_done();
}
