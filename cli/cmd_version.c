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
	int i, rc;

	if ((i = cli_parse(cmd, NULL, argc, argv, 0, &rc)) < 0)
		return rc;
	if (i < argc)
		return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
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
