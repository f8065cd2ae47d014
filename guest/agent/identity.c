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
#include <arpa/inet.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

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

/* eth0's MAC and address, with ioctls (no process): a new primary address
 * drops the routes of the old one, so the default route is added again.
 * No eth0 (a template without a NIC): nothing to do. */
static int set_net(const struct guest_identity *m, const char **step)
{
	struct ifreq ifr;
	struct rtentry rt;
	int fd, rc = -1;

	*step = "socket";
	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "eth0");
	if (ioctl(fd, SIOCGIFINDEX, &ifr) < 0) {
		rc = errno == ENODEV ? 0 : -1;
		*step = "eth0";
		goto out;
	}
	*step = "set eth0's MAC";
	ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
	memcpy(ifr.ifr_hwaddr.sa_data, m->mac, 6);
	if (ioctl(fd, SIOCSIFHWADDR, &ifr) < 0)
		goto out;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	memset(&ifr.ifr_addr, 0, sizeof(ifr.ifr_addr));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(m->ipv4);
	*step = "set eth0's address";
	if (ioctl(fd, SIOCSIFADDR, &ifr) < 0)
		goto out;
	sin->sin_addr.s_addr = htonl(m->prefix == 32 ? 0xffffffffu : ~(0xffffffffu >> m->prefix));
	*step = "set eth0's netmask";
	if (ioctl(fd, SIOCSIFNETMASK, &ifr) < 0)
		goto out;
	memset(&rt, 0, sizeof(rt));
	((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
	((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
	sin = (struct sockaddr_in *)&rt.rt_gateway;
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(m->gateway);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)"eth0";
	*step = "add the default route";
	if (ioctl(fd, SIOCADDRT, &rt) < 0 && errno != EEXIST)
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
	if (m.set_net && set_net(&m, &step) < 0)
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
