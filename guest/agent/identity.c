/* identity.c — IDENTITY: what a guest restored from a snapshot must not share
 * with its siblings or keep from the past — wall clock, hostname, and the
 * kernel's random state (fresh host entropy, credited, then a forced CRNG
 * reseed: otherwise every sandbox of a template reads the same bytes). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/random.h>
#include <sys/ioctl.h>

#include "guest/agent/agent.h"

static int add_entropy(const uint8_t *p, size_t n, const char **step)
{
	struct {
		struct rand_pool_info info;
		uint32_t buf[GUEST_MAX_ENTROPY / 4 + 1];
	} req;
	int fd, rc = -1;

	*step = "open /dev/urandom";
	if ((fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC)) < 0)
		return -1;
	memset(&req, 0, sizeof(req));
	memcpy(req.buf, p, n);
	req.info.buf_size = (int)n;
	req.info.entropy_count = (int)(n * 8); /* the host's getrandom(2) bytes: full entropy */
	*step = "RNDADDENTROPY";
	if (ioctl(fd, RNDADDENTROPY, &req.info) < 0)
		goto out;
	*step = "RNDRESEEDCRNG";
	if (ioctl(fd, RNDRESEEDCRNG) < 0)
		goto out;
	rc = 0;
out:
	{
		int e = errno;
		close(fd);
		errno = e;
	}
	return rc;
}

void identity_apply(struct agent *a, uint32_t id, const uint8_t *p, size_t n)
{
	struct guest_identity m;
	const char *why = NULL, *step = NULL;

	if (id == 0) {
		agent_send_error(a, 0, 0, "request id 0 is reserved");
		return;
	}
	if (!(a->caps & GUEST_CAP_IDENTITY)) {
		/* On the host (--fd, --listen) this would set the host's clock. */
		agent_send_error(a, id, EPERM, "IDENTITY is only served by an agent on its virtio port, as root");
		return;
	}
	if (guest_decode_identity(p, n, &m, &why) < 0) {
		agent_send_error(a, id, 0, "bad IDENTITY frame: %s", why);
		return;
	}
	if (m.set_time) {
		struct timespec ts = { .tv_sec = (time_t)m.time_sec, .tv_nsec = (long)m.time_nsec };
		step = "set the clock";
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			goto fail;
	}
	step = "sethostname";
	if (m.hostname && sethostname(m.hostname, strlen(m.hostname)) < 0)
		goto fail;
	if (m.entropy && add_entropy(m.entropy, m.entropy_len, &step) < 0)
		goto fail;
	guest_encode_exit(&a->out, id, &(struct guest_exit){ 0 });
	if (a->verbose)
		agent_log("id %u: identity set%s%s", id, m.hostname ? ", hostname " : "", m.hostname ? m.hostname : "");
	guest_identity_free(&m);
	return;
fail:
	agent_send_error(a, id, errno, "identity: %s: %s", step, strerror(errno));
	guest_identity_free(&m);
}
