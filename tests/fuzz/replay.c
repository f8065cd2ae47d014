/* replay.c — a main() for fuzz targets built without libFuzzer: feeds every
 * file under the target's corpus directory (or the paths given) to
 * LLVMFuzzerTestOneInput, so saved inputs are re-checked on every test run. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kiln.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_path(const char *path, int *count)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return -1;
	if (S_ISDIR(st.st_mode)) {
		struct dirent **names;
		int n = scandir(path, &names, NULL, alphasort);
		if (n < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			if (names[i]->d_name[0] != '.') {
				char *sub = kiln_path_join(path, names[i]->d_name);
				replay_path(sub, count);
				free(sub);
			}
			free(names[i]);
		}
		free(names);
		return 0;
	}
	char *data = NULL;
	size_t len = 0;
	kiln_error *err = NULL;
	if (kiln_read_file(path, &data, &len, 0, &err) < 0) {
		kiln_error_free(err);
		return -1;
	}
	LLVMFuzzerTestOneInput((const uint8_t *)data, len);
	free(data);
	(*count)++;
	return 0;
}

int main(int argc, char **argv)
{
	const char *self = strrchr(argv[0], '/');
	int count = 0;

	self = self ? self + 1 : argv[0];
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			replay_path(argv[i], &count);
	} else {
		/* replay_NAME replays tests/fuzz/corpus/NAME */
		const char *name = strncmp(self, "replay_", 7) == 0 ? self + 7 : self;
		char *dir = kiln_xasprintf("tests/fuzz/corpus/%s", name);
		if (replay_path(dir, &count) < 0) {
			printf("not ok - replay %s: no corpus at %s\n", name, dir);
			free(dir);
			return 1;
		}
		free(dir);
	}
	/* A replay of nothing checks nothing: an empty or unreadable corpus fails. */
	if (count == 0) {
		printf("not ok - replay %s: no inputs replayed\n", self);
		return 1;
	}
	/* Reaching here means no input crashed or tripped a sanitizer. */
	printf("ok - replay %s: %d inputs\n", self, count);
	return 0;
}
