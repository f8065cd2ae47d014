/* cmd_version.c — `kiln version`: the version of kiln and of the libraries
 * it was built with, so a bug report says what was running. */
#include <archive.h>
#include <curl/curl.h>
#include <ext2fs/ext2fs.h>
#include <microhttpd.h>
#include <openssl/crypto.h>
#include <sqlite3.h>
#include <zstd.h>

#include "cli/cli.h"

static int run(const struct kiln_command *cmd, int argc, char **argv)
{
	const char *ext2ver = NULL;
	int c;

	static const struct option opts[] = { { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	while ((c = cli_getopt(cmd, argc, argv, "h", opts)) != -1)
		return c == 'h' ? KILN_EXIT_OK : KILN_EXIT_USAGE;
	if (optind < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
	ext2fs_get_library_version(&ext2ver, NULL);
	printf("kiln %s\n", KILN_VERSION);
	printf("  libarchive   %s\n", archive_version_details());
	printf("  libext2fs    %s\n", ext2ver ? ext2ver : "?");
	printf("  libcurl      %s\n", curl_version_info(CURLVERSION_NOW)->version);
	printf("  openssl      %s\n", OpenSSL_version(OPENSSL_VERSION));
	printf("  zstd         %s\n", ZSTD_versionString());
	printf("  sqlite3      %s\n", sqlite3_libversion());
	printf("  jansson      %s\n", jansson_version_str());
	printf("  microhttpd   %s\n", MHD_get_version());
	return KILN_EXIT_OK;
}

const struct kiln_command kiln_cmd_version = {
	.name = "version",
	.summary = "print kiln's version and its libraries'",
	.usage = "Usage: kiln version\n\nPrint kiln's version and the versions of the libraries it uses.\n",
	.run = run,
};
