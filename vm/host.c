/* host.c — facts about the host that decide how a VM is started: whether KVM
 * is usable, the TSC rate a TCG guest must be told (its TSC is the host's,
 * and the guest cannot calibrate it reliably under TCG: see docs/vm.md;
 * measured once per host boot) and the host boot's id. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "vm/internal.h"

#define KVM_API_VERSION_STABLE 12
#define KVM_GET_API_VERSION_IOCTL 0xAE00 /* _IO(KVMIO, 0x00) from linux/kvm.h */

/* /dev/kvm alone is not enough: these hosts load kvm_pvm (a KVM for
 * PVM-aware guests only) — it answers the API and runs a real-mode probe, but
 * an ordinary kernel hangs or QEMU aborts.  Hardware KVM is kvm_intel/kvm_amd. */
bool vm_kvm_check(const char *sys_module, const char *dev_kvm, const char *force, const char **why)
{
	char *intel = kiln_path_join(sys_module, "kvm_intel"), *amd = kiln_path_join(sys_module, "kvm_amd");
	bool hw = access(intel, F_OK) == 0 || access(amd, F_OK) == 0, ok = false;
	int fd = -1;

	free(intel);
	free(amd);
	if (force && strcmp(force, "tcg") == 0) {
		*why = "KILN_ACCEL=tcg";
		goto out;
	}
	if (!hw && !(force && strcmp(force, "kvm") == 0)) {
		*why = "no kvm_intel or kvm_amd module (a /dev/kvm from kvm_pvm cannot run an ordinary guest)";
		goto out;
	}
	fd = open(dev_kvm, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		*why = "cannot open /dev/kvm";
		goto out;
	}
	ok = ioctl(fd, KVM_GET_API_VERSION_IOCTL, 0) == KVM_API_VERSION_STABLE;
	*why = ok ? "usable" : "/dev/kvm does not speak the stable KVM API";
out:
	if (fd >= 0)
		close(fd);
	return ok;
}

bool vm_kvm_usable(void)
{
	const char *why = NULL;
	bool ok = vm_kvm_check("/sys/module", "/dev/kvm", getenv("KILN_ACCEL"), &why);

	kiln_debug("vm: KVM %s: %s", ok ? "used" : "not used", why);
	return ok;
}

static uint64_t mono_raw_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A TSC reading bracketed by two clock reads: the narrowest bracket of many
 * tries, so a preemption between the reads does not skew the pairing.  A busy
 * host (or one whose clock reads trap to the hypervisor) may never give a
 * tight pair; the window is then lengthened to keep the error small. */
static uint64_t sample(uint64_t *ns, uint64_t *tsc)
{
	uint64_t best = UINT64_MAX;

	for (int tries = 0; tries < 64; tries++) {
		uint64_t a = mono_raw_ns(), t = __rdtsc(), b = mono_raw_ns();
		if (b - a < best) {
			best = b - a;
			*ns = a + (b - a) / 2;
			*tsc = t;
			if (best < 500)
				break;
		}
	}
	return best;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int vm_host_tsc_khz(uint32_t *khz, kiln_error **err)
{
	enum { WINDOWS = 5 };
	uint64_t rates[WINDOWS];

	for (int i = 0; i < WINDOWS; i++) {
		uint64_t ns0, tsc0, ns1, tsc1, w0, w1, window;
		w0 = sample(&ns0, &tsc0);
		/* 10 ms, or long enough that the brackets are < 0.01% of it. */
		window = 10000000u;
		if (w0 * 10000 > window)
			window = w0 * 10000 > 1000000000u ? 1000000000u : w0 * 10000;
		kiln_sleep_ms((long)(window / 1000000u));
		w1 = sample(&ns1, &tsc1);
		if (ns1 <= ns0 || tsc1 <= tsc0)
			return kiln_err(err, KILN_E_GENERIC, "measuring the host TSC: it does not advance");
		(void)w1;
		rates[i] = (tsc1 - tsc0) * 1000000u / (ns1 - ns0); /* ticks per ms = kHz */
	}
	qsort(rates, WINDOWS, sizeof(rates[0]), cmp_u64);
	if (rates[WINDOWS / 2] < 1000 || rates[WINDOWS / 2] > UINT32_MAX)
		return kiln_err(err, KILN_E_GENERIC, "measuring the host TSC: implausible rate %llu kHz",
				(unsigned long long)rates[WINDOWS / 2]);
	*khz = (uint32_t)rates[WINDOWS / 2];
	return 0;
}

char *vm_host_boot_id(void)
{
	char *id = NULL;
	size_t len = 0;
	kiln_error *e = NULL;

	if (kiln_read_file("/proc/sys/kernel/random/boot_id", &id, &len, 100, &e) < 0) {
		kiln_error_free(e);
		return NULL;
	}
	while (len && id[len - 1] == '\n')
		id[--len] = '\0';
	return id;
}

int vm_host_tsc_khz_cached(uint32_t *khz, kiln_error **err)
{
	static uint32_t mine; /* this process measured or read it already */
	char *boot_id = NULL, *home = NULL, *path = NULL;
	json_t *j = NULL;
	int rc = -1;

	if (mine) {
		*khz = mine;
		return 0;
	}
	if ((boot_id = vm_host_boot_id()) == NULL) {
		kiln_err(err, KILN_E_IO, "cannot read /proc/sys/kernel/random/boot_id");
		goto out;
	}
	path = kiln_home_path(NULL, KILN_PATH_HOST_TSC, NULL);
	j = kiln_json_load_file(path, NULL);
	if (j && kiln_json_str(j, "boot_id") && strcmp(kiln_json_str(j, "boot_id"), boot_id) == 0 &&
	    kiln_json_int(j, "tsc_khz", 0) > 0 && kiln_json_int(j, "tsc_khz", 0) <= UINT32_MAX) {
		*khz = mine = (uint32_t)kiln_json_int(j, "tsc_khz", 0);
		rc = 0;
		goto out;
	}
	if (vm_host_tsc_khz(khz, err) < 0)
		goto out;
	mine = *khz;
	json_decref(j);
	j = json_pack("{s:s, s:I}", "boot_id", boot_id, "tsc_khz", (json_int_t)*khz);
	kiln_error *e = NULL;
	home = kiln_home();
	if (kiln_mkdir_p(home, 0755, &e) < 0 || kiln_json_write_file(path, j, &e) < 0) {
		kiln_debug("vm: not caching the TSC rate: %s", kiln_error_message(e));
		kiln_error_free(e);
	}
	rc = 0;
out:
	json_decref(j);
	free(boot_id);
	free(home);
	free(path);
	return rc;
}
