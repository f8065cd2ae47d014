/* secrets.c — `kiln build --remote --secret`: a build's secrets come with its
 * request and live only in this process's memory until a worker of this host
 * (the build is pinned to it) hands them to the build's `kiln build` as
 * memfds (--secret id=ID,src=/proc/self/fd/N): never in the queue's
 * database, a log line, a file on disk, the context store or a cache key
 * (the builder keeps them out of layers and keys as for a local build). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "service/internal.h"

#define SECRET_MAX (500u * 1024u) /* BuildKit's limit on one, as the local build's */
#define SECRETS_MAX 64

struct svc_secrets {
	char id[SVC_ID_MAX];        /* the build's */
	size_t n;
	char **name;
	unsigned char **data;
	size_t *len;
	struct svc_secrets *next;
};

void svc_secrets_free(struct svc_secrets *sec)
{
	if (sec == NULL)
		return;
	for (size_t i = 0; i < sec->n; i++) {
		free(sec->name[i]);
		explicit_bzero(sec->data[i], sec->len[i]);
		free(sec->data[i]);
	}
	free(sec->name);
	free(sec->data);
	free(sec->len);
	free(sec);
}

size_t svc_secrets_count(const struct svc_secrets *sec)
{
	return sec->n;
}

const char *svc_secrets_id(const struct svc_secrets *sec, size_t i)
{
	return sec->name[i];
}

/* The string's bytes wiped before jansson frees them. */
static void wipe_string(json_t *v)
{
	if (json_is_string(v))
		explicit_bzero((char *)json_string_value(v), json_string_length(v));
}

int svc_secrets_take_json(json_t *req, struct svc_secrets **out, kiln_error **err)
{
	json_t *a = json_object_get(req, "secrets"), *e;
	struct svc_secrets *sec = NULL;
	size_t i;
	int ret = -1;

	*out = NULL;
	if (a == NULL || json_is_null(a)) {
		json_object_del(req, "secrets");
		return 0;
	}
	json_incref(a);
	json_object_del(req, "secrets"); /* whatever happens, never stored */
	if (!json_is_array(a) || json_array_size(a) > SECRETS_MAX) {
		kiln_err(err, KILN_E_INVALID, "secrets: want an array of at most %d {\"id\",\"data\"}", SECRETS_MAX);
		goto out;
	}
	sec = kiln_xcalloc(1, sizeof(*sec));
	sec->name = kiln_xcalloc(json_array_size(a) + 1, sizeof(*sec->name));
	sec->data = kiln_xcalloc(json_array_size(a) + 1, sizeof(*sec->data));
	sec->len = kiln_xcalloc(json_array_size(a) + 1, sizeof(*sec->len));
	json_array_foreach(a, i, e) {
		const char *id = json_string_value(json_object_get(e, "id"));
		json_t *d = json_object_get(e, "data");
		size_t b64 = json_string_length(d);
		if (id == NULL || !*id || strlen(id) > 255 || strpbrk(id, ",=\"\n") || !json_is_string(d)) {
			kiln_err(err, KILN_E_INVALID, "secrets[%zu]: want {\"id\": ID (no ',', '=', quote or newline), \"data\": base64}", i);
			goto out;
		}
		for (size_t k = 0; k < sec->n; k++)
			if (strcmp(sec->name[k], id) == 0) {
				kiln_err(err, KILN_E_INVALID, "secret %s: given twice", id);
				goto out;
			}
		if (b64 % 4 || b64 / 4 * 3 > SECRET_MAX + 2) {
			kiln_err(err, KILN_E_INVALID, "secret %s: %s", id,
				 b64 % 4 ? "data is not base64" : "over 500 KiB (BuildKit's limit)");
			goto out;
		}
		unsigned char *buf = kiln_xmalloc(b64 / 4 * 3 + 1);
		int n = b64 ? EVP_DecodeBlock(buf, (const unsigned char *)json_string_value(d), (int)b64) : 0;
		if (n < 0) {
			free(buf);
			kiln_err(err, KILN_E_INVALID, "secret %s: data is not base64", id);
			goto out;
		}
		/* EVP_DecodeBlock counts the padding as bytes */
		const char *t = json_string_value(d);
		for (size_t k = b64; k > 0 && t[k - 1] == '=' && n > 0; k--)
			n--;
		sec->name[sec->n] = kiln_xstrdup(id);
		sec->data[sec->n] = buf;
		sec->len[sec->n] = (size_t)n;
		sec->n++;
		wipe_string(d);
	}
	*out = sec;
	sec = NULL;
	ret = 0;
out:
	json_array_foreach(a, i, e)
		wipe_string(json_object_get(e, "data"));
	json_decref(a);
	svc_secrets_free(sec);
	return ret;
}

void svc_secrets_keep(svc *s, const char *id, struct svc_secrets *sec)
{
	snprintf(sec->id, sizeof(sec->id), "%s", id);
	pthread_mutex_lock(&s->lock);
	sec->next = s->secrets;
	s->secrets = sec;
	pthread_mutex_unlock(&s->lock);
}

struct svc_secrets *svc_secrets_claim(svc *s, const char *id)
{
	struct svc_secrets **pp, *sec = NULL;

	pthread_mutex_lock(&s->lock);
	for (pp = &s->secrets; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0) {
			sec = *pp;
			*pp = sec->next;
			sec->next = NULL;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	return sec;
}

void svc_secrets_free_all(svc *s)
{
	while (s->secrets) {
		struct svc_secrets *n = s->secrets->next;
		svc_secrets_free(s->secrets);
		s->secrets = n;
	}
}

int svc_secrets_args(const struct svc_secrets *sec, kiln_strv *argv, int **fds, size_t *nfds, kiln_error **err)
{
	*fds = kiln_xcalloc(sec->n + 1, sizeof(int));
	*nfds = 0;
	for (size_t i = 0; i < sec->n; i++) {
		/* anonymous memory: no path, gone with its last descriptor */
		int fd = memfd_create("kiln-build-secret", MFD_CLOEXEC);
		if (fd < 0)
			return kiln_err_errno(err, errno, "secret %s: memfd", sec->name[i]);
		(*fds)[(*nfds)++] = fd;
		if (kiln_write_full(fd, sec->data[i], sec->len[i]) < 0)
			return kiln_err_errno(err, errno, "secret %s: memfd", sec->name[i]);
		kiln_strv_push(argv, "--secret");
		kiln_strv_push_owned(argv, kiln_xasprintf("id=%s,src=/proc/self/fd/%d", sec->name[i], fd));
	}
	return 0;
}
