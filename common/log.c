/* log.c — leveled logging to stderr.  The level is read once from KILN_LOG
 * unless the CLI sets it; messages carry a "kiln: LEVEL:" prefix so they are
 * easy to tell apart from a command's own output. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kiln.h"

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };
static int current_level = -1;

int kiln_log_parse_level(const char *name, enum kiln_loglevel *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (enum kiln_loglevel)i;
			return 0;
		}
	}
	if (strcasecmp(name, "warning") == 0) {
		*out = KILN_LOG_WARN;
		return 0;
	}
	return -1;
}

enum kiln_loglevel kiln_log_level(void)
{
	if (current_level < 0) {
		const char *env = getenv("KILN_LOG");
		enum kiln_loglevel lvl = KILN_LOG_WARN;

		if (env != NULL && *env != '\0' && kiln_log_parse_level(env, &lvl) < 0)
			fprintf(stderr, "kiln: warn: KILN_LOG=%s is not a level (error, warn, info, debug, trace)\n", env);
		current_level = (int)lvl;
	}
	return (enum kiln_loglevel)current_level;
}

void kiln_log_set_level(enum kiln_loglevel level)
{
	current_level = (int)level;
}

void kiln_log(enum kiln_loglevel level, const char *fmt, ...)
{
	kiln_buf b = KILN_BUF_INIT;
	va_list ap;

	if (level > kiln_log_level())
		return;
	kiln_buf_addf(&b, "kiln: %s: ", level_names[level]);
	va_start(ap, fmt);
	kiln_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (b.len == 0 || b.buf[b.len - 1] != '\n')
		kiln_buf_addc(&b, '\n');
	/* One write per message keeps lines whole when several processes log. */
	fwrite(b.buf, 1, b.len, stderr);
	kiln_buf_free(&b);
}
