/* internal.h — builder internals shared between its files, not part of the
 * stage's contract: the image path index, layer path forms. */
#ifndef KILN_BUILDER_INTERNAL_H
#define KILN_BUILDER_INTERNAL_H

#include "builder/builder.h"

/* "./a/b/" → "a/b"; "/" or "." → "" (the root). */
char *build_layer_path(const char *name);
/* Append s as one word for /bin/sh: single quotes, ' written as '\'' (template.c). */
void build_shell_quote(kiln_buf *b, const char *s);
/* Extract the current entry e of reader a under dir through disk writer w:
 * its path and hardlink target are rebased into dir, then header and data
 * are written.  `what` names the source in errors ("layer X", "ADD F"). */
struct archive;
struct archive_entry;
int build_extract_entry(struct archive *a, struct archive *w, struct archive_entry *e, const char *dir,
			const char *rel, const char *what, kiln_error **err);

void build_fsindex_put(build_fsindex *x, const char *path, mode_t mode, uid_t uid, gid_t gid, const char *link);
/* Remember the contents of /etc/passwd or /etc/group (other paths ignored). */
void build_fsindex_set_file(build_fsindex *x, const char *path, const char *data, size_t len);

#include "dockerfile-parser/dockerfile.h"

/* exec_capture.c: layers between the host and the builder VM */
typedef struct guest_conn guest_conn;
/* A step's overlay upper directory guest_upper, streamed from the guest →
 * items with OCI whiteouts, sorted; the runtime's /etc/resolv.conf, hosts,
 * hostname left out.  Small files' content stays in memory, bigger ones go
 * to numbered files in the scratch directory `dir` (created). */
int build_upper_changes(guest_conn *conn, const char *guest_upper, const char *dir, struct build_changes *ch,
			kiln_error **err);
/* Layer blobs as one uncompressed tar at `out` for the guest to extract,
 * layer i under the directory prefixes[i], and their xattrs (which the
 * guest's tar drops) added to *xattrs; returns 1 (nothing usable) when one
 * holds whiteouts, which a plain directory cannot express. */
struct guest_xattr_list;
int build_layers_plain_tar(build_store *s, const struct build_layer *layers, const char *const *prefixes, size_t n,
			   const char *out, struct guest_xattr_list *xattrs, kiln_error **err);
int build_upload_tar_file(guest_conn *conn, const char *tar, const char *guest_dir, kiln_error **err);

/* The build driver's state (build.c), shared with the RUN step (run.c). */
struct stage_state {
	bool built;
	json_t *config;
	struct build_layer *layers;
	size_t n_layers, cap;
	build_fsindex *idx;
	char key[KILN_DIGEST_MAX];
	bool cmd_set;
	build_tree *files; /* extracted for COPY --from, on demand */
	build_tree *part;  /* the last partial extraction (only a COPY's sources) */
	build_exec_session *session; /* the executor's (the stage's builder VM) */
	size_t n_base;     /* layers[0..n_base) come from the stage's FROM */
	size_t n_indexed;  /* layers applied to idx so far (build_stage_index) */
};

struct img_slot {
	char *ref;
	struct build_image *im;
	build_tree *files, *part;
};

struct run {
	const struct build_options *o;
	build_store *s;
	struct df_ast *ast;
	struct df_plan *plan;
	char *scratch;
	unsigned n_part;  /* partial extractions made in scratch (part-N) */
	build_ignore *ig;
	build_tree *context;
	struct stage_state *st;
	struct img_slot *imgs;
	size_t n_imgs;
	int step, total;
	char created[KILN_TIME_MAX];
	size_t cached;
	struct build_run_stats last_run; /* of the RUN step just executed */
	bool last_run_valid;
};

void build_emit(struct run *r, const struct build_event *ev);
const char *build_step_flag(const struct df_step *st, const char *name);
int build_add_layer(struct run *r, struct stage_state *ss, const struct build_layer *l, kiln_error **err);
/* Bring ss->idx up to the stage's layers before asking it anything. */
int build_stage_index(struct run *r, struct stage_state *ss, kiln_error **err);
/* The files COPY --from / RUN --mount from= read: a stage's or an image's
 * (owners kept), else the build context through .dockerignore. */
int build_source_tree(struct run *r, int from_stage, const char *from_image, const build_tree **tree,
		      bool *keep_owner, kiln_error **err);
/* The same for a COPY --from whose sources are srcs[]: only what they can
 * name is extracted from the stage or image (the tree may hold nothing else). */
int build_source_tree_for(struct run *r, int from_stage, const char *from_image, const char *const *srcs,
			  size_t n_srcs, const build_tree **tree, bool *keep_owner, kiln_error **err);
/* run.c: a RUN step (cache lookup, mounts, heredocs, executor). */
int build_run_step(struct run *r, struct stage_state *ss, const struct df_stage *sg, size_t index,
		   const char *text, bool *cached, kiln_error **err);
/* exec_ssh.c: a RUN --mount=type=ssh socket at guest_path relayed to the
 * host's agent (m->socket) while the step runs. */
struct build_ssh_relay;
int build_ssh_relay_start(guest_conn *c, const char *guest_path, const struct build_run_mount *m,
			  struct build_ssh_relay **out, kiln_error **err);
void build_ssh_relay_stop(struct build_ssh_relay *r);
/* End the stage's executor session (its VM), if any. */
void build_stage_end(struct run *r, struct stage_state *ss);

/* The builder VM's memory unless build_vm_opts says: the same whether it is
 * restored (exec_warm.c: the snapshot is made with it) or booted from a big
 * stage's ext4 (exec_vm.c), so a step's limits do not depend on the path.
 * Guest RAM is a sparse file: what the guest never touches costs nothing. */
#define BUILD_VM_MEMORY_MIB 2048u

/* exec_warm.c: the builder VM restored from its snapshot (made on first use).
 * base: the digests of the stage's base layers (its FROM's), bottom first;
 * when a snapshot with them uploaded exists, the VM is restored from it and
 * build_warm_has_base() says so: they are then in place as l0, l1, ... */
struct build_warm_vm;
/* no_save: the stage will hold secrets, so this VM is not the one that saves
 * the base's snapshot (its RAM is then never mapped to a file).
 * stage_disk: an ext4 of the stage (VM_SPARE_BYTES long) attached as the VM's
 * spare disk, mounted read-only at BUILD_GUEST_STAGE_DIR; base is then
 * ignored.  NULL: the snapshot's empty spare disk. */
#define BUILD_GUEST_STAGE_DIR "/run/kiln/stage"
int build_warm_start(build_store *s, const struct build_vm_opts *vo, const char *scratch, char *const *base,
		     size_t n_base, bool no_save, const char *stage_disk, struct build_warm_vm **out,
		     kiln_error **err);
guest_conn *build_warm_conn(struct build_warm_vm *w);
/* The VM has held a secret or an agent socket: build_warm_save_base refuses. */
void build_warm_taint(struct build_warm_vm *w);
bool build_warm_has_base(const struct build_warm_vm *w);
/* Once the base layers are uploaded (as l0, l1, ...): if this is the base's
 * second use, snapshot the VM with them (failures only warned).  <0 only when
 * the VM could not be resumed afterwards. */
int build_warm_save_base(struct build_warm_vm *w, kiln_error **err);
void build_warm_stop(struct build_warm_vm *w);

/* image.c */
json_t *build_config_scratch(void);
/* Apply a non-filesystem step to the image config; *cmd_set tracks whether
 * this stage set CMD (ENTRYPOINT resets an inherited one). */
int build_config_step(json_t *root, const struct df_step *st, bool *cmd_set, kiln_error **err);
json_t *build_command_json(const struct df_step *st);
void build_config_history(json_t *root, const char *created, const char *created_by, bool empty_layer);
int build_image_commit(build_store *s, json_t *root, const struct build_layer *layers, size_t n,
		       const char *created, char manifest[KILN_DIGEST_MAX], char config[KILN_DIGEST_MAX],
		       kiln_error **err);

#endif
