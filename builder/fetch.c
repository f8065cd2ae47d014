/* fetch.c — ADD URL: download with libcurl to a scratch file, hashing as it
 * arrives so --checksum is verified without a second read.  Bounded by
 * timeouts; redirects followed (at most 10), HTTP errors reported. */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "builder/builder.h"

struct sink {
	FILE *f;
	kiln_hasher *h;
	int failed;
};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct sink *s = ud;
	size_t len = size * n;

	kiln_hasher_update(s->h, p, len);
	if (fwrite(p, 1, len, s->f) != len) {
		s->failed = errno ? errno : EIO;
		return 0;
	}
	return len;
}

int build_fetch_url(const char *url, const char *path, const char *checksum, kiln_error **err)
{
	struct sink s = { 0 };
	CURL *curl = NULL;
	char errbuf[CURL_ERROR_SIZE] = "";
	char got[KILN_DIGEST_MAX];
	enum kiln_digest_algo algo = KILN_SHA256;
	long status = 0;
	int rc = -1;
	CURLcode cr;

	if (checksum && kiln_digest_parse(checksum, &algo, err) < 0)
		return kiln_error_wrap(err, "ADD --checksum");
	s.f = fopen(path, "wbx");
	if (!s.f)
		return kiln_err_errno(err, errno, "ADD %s: create %s", url, path);
	s.h = kiln_hasher_new(algo);
	curl = curl_easy_init();
	if (!curl) {
		kiln_err(err, KILN_E_GENERIC, "ADD %s: curl init failed", url);
		goto out;
	}
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
	curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
	curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	cr = curl_easy_perform(curl);
	if (s.failed) {
		kiln_err_errno(err, s.failed, "ADD %s: write %s", url, path);
		goto out;
	}
	if (cr != CURLE_OK) {
		kiln_err(err, KILN_E_IO, "ADD %s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(cr));
		goto out;
	}
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 400) {
		kiln_err(err, KILN_E_NOTFOUND, "ADD %s: HTTP status %ld", url, status);
		goto out;
	}
	if (fflush(s.f) != 0) {
		kiln_err_errno(err, errno, "ADD %s: write %s", url, path);
		goto out;
	}
	kiln_hasher_final(s.h, got);
	s.h = NULL;
	if (checksum && strcmp(got, checksum) != 0) {
		kiln_err(err, KILN_E_INVALID, "ADD %s: checksum mismatch: got %s, want %s", url, got, checksum);
		goto out;
	}
	rc = 0;
out:
	if (s.h)
		kiln_hasher_free(s.h);
	if (curl)
		curl_easy_cleanup(curl);
	fclose(s.f);
	return rc;
}
