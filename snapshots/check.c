/* check.c — refusing a template this host cannot restore (another QEMU, a
 * different machine, agent protocol, accelerator or TSC rate) or whose blobs
 * are not what the config says, before any guest runs; and listing the store.
 * The host's TSC rate costs ~60 ms to measure: vm/ caches it per boot. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "snapshots/internal.h"

/* A restored TCG guest keeps the TSC rate it calibrated at boot; beyond this
 * difference its clock would visibly run fast or slow. */
#define TSC_TOLERANCE 0.002

int snap_check_depends(const snap_template *t, const char *qemu_version, kiln_error **err)
{
	const struct snap_config *c = &t->cfg;
	const struct snap_depends *d = &c->depends;
	enum vm_accel accel = c->has_depends && strcmp(d->accel, "kvm") == 0 ? VM_ACCEL_KVM : VM_ACCEL_TCG;
	char *sig = vm_machine_signature(accel, c->cpus, c->memory_mib, snap_template_has_nic(t));
	int rc = -1;

	if (!c->has_depends) {
		kiln_err(err, KILN_E_INVALID, "the template records no dependencies");
		goto out;
	}
	if (d->agent_protocol != GUEST_PROTO_VERSION) {
		kiln_err(err, KILN_E_INVALID, "the template's guest agent speaks protocol %u, this kiln speaks %u",
			 d->agent_protocol, GUEST_PROTO_VERSION);
		goto out;
	}
	if (strcmp(d->machine, sig) != 0) {
		kiln_err(err, KILN_E_INVALID, "the template was made for machine \"%s\", this kiln restores \"%s\"",
			 d->machine, sig);
		goto out;
	}
	if ((accel == VM_ACCEL_KVM) != vm_kvm_usable()) {
		kiln_err(err, KILN_E_INVALID, "the template was made under %s, this host runs %s", d->accel,
			 accel == VM_ACCEL_KVM ? "TCG (no usable /dev/kvm)" : "KVM");
		goto out;
	}
	if (qemu_version && strcmp(d->qemu, qemu_version) != 0) {
		kiln_err(err, KILN_E_INVALID, "the template was made with QEMU %s, this host has QEMU %s", d->qemu,
			 qemu_version);
		goto out;
	}
	if (accel == VM_ACCEL_TCG) {
		uint32_t khz = 0, want = d->tsc_khz;
		if (vm_host_tsc_khz_cached(&khz, err) < 0)
			goto out;
		if (want == 0 || fabs((double)khz - (double)want) > TSC_TOLERANCE * (double)want) {
			kiln_err(err, KILN_E_INVALID,
				 "the template's guest counts time with a %u kHz TSC, this host's runs at %u kHz "
				 "(its clock would drift: make the template on this host)",
				 want, khz);
			goto out;
		}
	}
	rc = 0;
out:
	free(sig);
	return rc;
}

static int check_blob(const snap_template *t, enum snap_role role, const char *path, bool hash, kiln_error **err)
{
	const char *key = snap_role_name(role), *want = t->cfg.blob[role].digest;
	uint64_t size = t->cfg.blob[role].size;
	char got[KILN_DIGEST_MAX];
	struct stat st;

	/* a symlink planted in the store would make kiln (and the jail's bind
	 * mount) open a host file: only a regular file is a blob */
	if (lstat(path, &st) < 0)
		return kiln_err_errno(err, errno, "the template's %s blob %s", key, path);
	if (!S_ISREG(st.st_mode))
		return kiln_err(err, KILN_E_INVALID, "the template's %s blob %s is not a regular file (%s): refused", key,
				path, S_ISLNK(st.st_mode) ? "a symlink" : "a special file");
	if ((uint64_t)st.st_size != size)
		return kiln_err(err, KILN_E_INVALID, "the template's %s blob is corrupted: %lld bytes, want %llu", key,
				(long long)st.st_size, (unsigned long long)size);
	if (!hash)
		return 0;
	if (kiln_digest_file(KILN_SHA256, path, got, err) < 0)
		return -1;
	if (strcmp(got, want) != 0)
		return kiln_err(err, KILN_E_INVALID, "the template's %s blob is corrupted: digest %s, want %s", key, got,
				want);
	return 0;
}

/* The store's blob directories themselves: a symlink there redirects every blob. */
static int check_store_dirs(kiln_error **err)
{
	char *store = snap_store_dir(), *b = kiln_home_path(NULL, KILN_PATH_SNAP_BLOBS, NULL), *s = kiln_path_join(b, "sha256");
	const char *paths[] = { store, b, s };
	int rc = 0;

	for (size_t i = 0; i < 3 && rc == 0; i++) {
		struct stat st;
		if (lstat(paths[i], &st) == 0 && !S_ISDIR(st.st_mode))
			rc = kiln_err(err, KILN_E_INVALID, "the template store's %s is not a directory (%s): refused",
				      paths[i], S_ISLNK(st.st_mode) ? "a symlink" : "a file");
	}
	free(store);
	free(b);
	free(s);
	return rc;
}

int snap_template_check(const snap_template *t, bool full, kiln_error **err)
{
	int rc = -1;

	if (snap_check_depends(t, NULL, err) < 0)
		goto out;
	/* The state is small and decides whether QEMU accepts the rest: always hashed. */
	if (check_store_dirs(err) < 0 || check_blob(t, SNAP_ROLE_STATE, t->state, true, err) < 0 ||
	    check_blob(t, SNAP_ROLE_MEMORY, t->memory, full, err) < 0 ||
	    check_blob(t, SNAP_ROLE_DISK, t->disk, full, err) < 0 ||
	    check_blob(t, SNAP_ROLE_ROOTFS, t->rootfs, full, err) < 0)
		goto out;
	/* the disk's qcow2 header may name no other backing file than the
	 * rootfs blob beside it (QEMU is given that one explicitly anyway) and
	 * no external data file */
	if (vm_qcow2_check(t->disk, kiln_digest_hex(t->cfg.blob[SNAP_ROLE_ROOTFS].digest), err) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		kiln_error_wrap(err, "template %.19s", t->digest);
	return rc;
}

static void list_refs(const char *root, const char *rel, json_t *out)
{
	char *dir = *rel ? kiln_path_join(root, rel) : kiln_xstrdup(root);
	DIR *d = opendir(dir);
	struct dirent *de;

	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char *sub = *rel ? kiln_xasprintf("%s/%s", rel, de->d_name) : kiln_xstrdup(de->d_name);
		char *full = kiln_path_join(root, sub);
		struct stat st;
		if (stat(full, &st) == 0 && S_ISDIR(st.st_mode)) {
			list_refs(root, sub, out);
		} else if (*rel) {
			/* a file sha256:HEX is a template pulled by digest: NAME@sha256:HEX */
			char *ref = kiln_xasprintf("%s%s%s", rel, strchr(de->d_name, ':') ? "@" : ":", de->d_name);
			kiln_error *e = NULL;
			snap_template *t = snap_template_open(ref, &e);
			json_t *item = json_pack("{s:s}", "name", ref);
			if (t) {
				const struct snap_config *c = &t->cfg;
				json_object_set_new(item, "digest", json_string(t->digest));
				if (c->created)
					json_object_set_new(item, "created", json_string(c->created));
				if (c->cpus)
					json_object_set_new(item, "cpus", json_integer(c->cpus));
				if (c->memory_mib)
					json_object_set_new(item, "memory_mib", json_integer(c->memory_mib));
				struct stat ms;
				if (stat(t->memory, &ms) == 0)
					json_object_set_new(item, "memory_stored_bytes",
							    json_integer((json_int_t)ms.st_blocks * 512));
			} else {
				json_object_set_new(item, "error", json_string(kiln_error_message(e)));
			}
			kiln_error_free(e);
			snap_template_free(t);
			json_array_append_new(out, item);
			free(ref);
		}
		free(sub);
		free(full);
	}
	if (d)
		closedir(d);
	free(dir);
}

json_t *snap_template_list(kiln_error **err)
{
	char *refs = kiln_home_path(NULL, KILN_PATH_SNAP_REFS, NULL);
	json_t *out = json_array();

	(void)err;
	list_refs(refs, "", out);
	free(refs);
	return out;
}
