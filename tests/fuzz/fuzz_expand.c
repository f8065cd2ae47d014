/* fuzz_expand.c — libFuzzer target for the word lexer: the first byte picks
 * the escape character, the rest is a word expanded both as one word and
 * split into words against a small fixed environment. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dockerfile-parser/dockerfile.h"

static const char *lookup(void *ctx, const char *name)
{
	static const char *const env[] = { "A", "a b  c", "EMPTY", "", "P", "/usr/local/bin", "U", "x*y?z", NULL };

	(void)ctx;
	for (size_t i = 0; env[i]; i += 2)
		if (strcmp(env[i], name) == 0)
			return env[i + 1];
	return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char escape, *word, *out = NULL;
	kiln_strv words = KILN_STRV_INIT;
	kiln_error *err = NULL;

	if (size < 1 || size > 4096)
		return 0;
	escape = (data[0] & 1) ? '`' : '\\';
	word = kiln_xstrndup((const char *)data + 1, size - 1); /* stops at an embedded NUL */
	if (df_expand_word(word, escape, lookup, NULL, &out, &err) < 0)
		kiln_error_clear(&err);
	if (df_expand_words(word, escape, lookup, NULL, &words, &err) < 0)
		kiln_error_clear(&err);
	free(out);
	kiln_strv_free(&words);
	free(word);
	return 0;
}
