/* test.h — the unit-test harness: checks that record a failure and go on,
 * one "ok - NAME" / "not ok - NAME" line per test (or "ok - NAME # skip WHY"
 * for one that cannot run here), which tests/run.sh counts.  Each
 * tests/unit/test_*.c is its own program built under ASan + UBSan; with
 * KILN_TEST_ONLY=NAME[,NAME...] it runs only those tests (tests/README.md). */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

static int test_checks_failed;
static int test_passed, test_failed, test_skipped;
static const char *test_skip_why;   /* set by SKIP() in the running test */
static const char *test_current;    /* the running test's name */
static int test_selected;           /* tests KILN_TEST_ONLY let run */

/* End the running test here: it is reported skipped (unless a check already
 * failed).  For a test whose whole point needs what is missing. */
#define SKIP(why)                        \
	do {                             \
		test_skip_why = (why);   \
		return;                  \
	} while (0)

/* A part of the running test that cannot run here: its own skip line. */
static inline void test_skip_part(const char *what, const char *why)
{
	printf("ok - %s: %s # skip %s\n", test_current ? test_current : "?", what, why);
	test_skipped++;
}

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			printf("#   %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			test_checks_failed++;                                         \
		}                                                                     \
	} while (0)

#define CHECK_STR(a, b)                                                                     \
	do {                                                                                \
		const char *a_ = (a), *b_ = (b);                                            \
		if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0) {                      \
			printf("#   %s:%d: %s == %s\n#     got:  \"%s\"\n#     want: \"%s\"\n", \
			       __FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
			test_checks_failed++;                                               \
		}                                                                           \
	} while (0)

#define CHECK_INT(a, b)                                                                       \
	do {                                                                                  \
		long long a_ = (long long)(a), b_ = (long long)(b);                           \
		if (a_ != b_) {                                                               \
			printf("#   %s:%d: %s == %s: got %lld, want %lld\n", __FILE__, __LINE__, \
			       #a, #b, a_, b_);                                               \
			test_checks_failed++;                                                 \
		}                                                                             \
	} while (0)

static inline void test_run(const char *name, void (*fn)(void))
{
	int before = test_checks_failed;

	const char *only = getenv("KILN_TEST_ONLY");

	if (only && *only) {
		size_t n = strlen(name);
		bool wanted = false;
		for (const char *p = only; *p;) {
			const char *e = strchr(p, ',');
			size_t l = e ? (size_t)(e - p) : strlen(p);
			wanted |= l == n && strncmp(p, name, n) == 0;
			p += l + (e != NULL);
		}
		if (!wanted)
			return;
	}
	test_selected++;
	test_current = name;
	test_skip_why = NULL;
	fn();
	if (test_checks_failed > before) {
		printf("not ok - %s\n", name);
		test_failed++;
	} else if (test_skip_why) {
		printf("ok - %s # skip %s\n", name, test_skip_why);
		test_skipped++;
	} else {
		printf("ok - %s\n", name);
		test_passed++;
	}
	test_current = NULL;
	fflush(stdout);
}

#define RUN(fn) test_run(#fn, fn)


static inline int test_done(void)
{
	printf("# %d passed, %d failed, %d skipped\n", test_passed, test_failed, test_skipped);
	if (getenv("KILN_TEST_ONLY") && *getenv("KILN_TEST_ONLY") && test_selected == 0) {
		printf("not ok - no test here is named %s (KILN_TEST_ONLY)\n", getenv("KILN_TEST_ONLY"));
		return 1;
	}
	return test_failed ? 1 : 0;
}

#endif
