/* host.c — facts about the host that decide how a VM is started: whether KVM
 * is usable, and the TSC rate a TCG guest must be told (its TSC is the host's,
 * and the guest cannot calibrate it reliably under TCG: see docs/vm.md). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "vm/vm.h"

#define KVM_API_VERSION_STABLE 12
#define KVM_GET_API_VERSION_IOCTL 0xAE00 /* _IO(KVMIO, 0x00) from linux/kvm.h */

/* /dev/kvm alone is not enough: these hosts load kvm_pvm (a KVM for
 * PVM-aware guests only) — it answers the API and runs a real-mode probe, but
 * an ordinary kernel hangs or QEMU aborts.  Hardware KVM is kvm_intel/kvm_amd. */
bool vm_kvm_usable(void)
{
	const char *force = getenv("KILN_ACCEL");
	bool ok;
	int fd;

	if (force && strcmp(force, "tcg") == 0)
		return false;
	if (access("/sys/module/kvm_intel", F_OK) < 0 && access("/sys/module/kvm_amd", F_OK) < 0 &&
	    !(force && strcmp(force, "kvm") == 0))
		return false;
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return false;
	ok = ioctl(fd, KVM_GET_API_VERSION_IOCTL, 0) == KVM_API_VERSION_STABLE;
	close(fd);
	return ok;
}

static uint64_t mono_raw_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A TSC reading bracketed by two clock reads; retried when the pair is wide
 * (we were preempted in between), so the pairing error stays sub-microsecond. */
static int sample(uint64_t *ns, uint64_t *tsc)
{
	for (int tries = 0; tries < 100; tries++) {
		uint64_t a = mono_raw_ns(), t = __rdtsc(), b = mono_raw_ns();
		if (b - a < 2000) {
			*ns = a + (b - a) / 2;
			*tsc = t;
			return 0;
		}
	}
	return -1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int vm_host_tsc_khz(uint32_t *khz, kiln_error **err)
{
	enum { WINDOWS = 5, WINDOW_NS = 10 * 1000 * 1000 };
	uint64_t rates[WINDOWS];

	for (int i = 0; i < WINDOWS; i++) {
		uint64_t ns0, tsc0, ns1, tsc1;
		struct timespec nap = { 0, WINDOW_NS };
		if (sample(&ns0, &tsc0) < 0)
			return kiln_err(err, KILN_E_GENERIC, "measuring the host TSC: the clock reads were never close together");
		while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
			;
		if (sample(&ns1, &tsc1) < 0)
			return kiln_err(err, KILN_E_GENERIC, "measuring the host TSC: the clock reads were never close together");
		if (ns1 <= ns0 || tsc1 <= tsc0)
			return kiln_err(err, KILN_E_GENERIC, "measuring the host TSC: it does not advance");
		rates[i] = (tsc1 - tsc0) * 1000000u / (ns1 - ns0); /* ticks per ms = kHz */
	}
	qsort(rates, WINDOWS, sizeof(rates[0]), cmp_u64);
	if (rates[WINDOWS / 2] == 0 || rates[WINDOWS / 2] > UINT32_MAX)
		return kiln_err(err, KILN_E_GENERIC, "measuring the host TSC: implausible rate %llu kHz",
				(unsigned long long)rates[WINDOWS / 2]);
	*khz = (uint32_t)rates[WINDOWS / 2];
	return 0;
}
