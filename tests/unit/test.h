/* test.h — the unit-test harness: checks that record a failure and go on,
 * one "ok - NAME" / "not ok - NAME" line per test, which tests/run.sh counts.
 * Each tests/unit/test_*.c is its own program built under ASan + UBSan. */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <stdio.h>
#include <string.h>

static int test_checks_failed;
static int test_passed, test_failed;

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

	fn();
	if (test_checks_failed > before) {
		printf("not ok - %s\n", name);
		test_failed++;
	} else {
		printf("ok - %s\n", name);
		test_passed++;
	}
	fflush(stdout);
}

#define RUN(fn) test_run(#fn, fn)

static inline int test_done(void)
{
	printf("# %d passed, %d failed\n", test_passed, test_failed);
	return test_failed ? 1 : 0;
}

#endif
