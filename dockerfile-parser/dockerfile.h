/* dockerfile.h — the Dockerfile stage's contract.  Two passes:
 *   1. syntax: text → AST (df_parse), the same tree BuildKit's parser builds,
 *      printable as JSON or in BuildKit's dump format;
 *   2. semantics: AST + build args + target → build plan (df_plan_build):
 *      word expansion, ARG/ENV scoping, the stage graph and build order.
 * Every error message starts "FILE:LINE:COL: " (COL is 1-based; 1 when only
 * the line is known).  Nothing here prints or exits. */
#ifndef KILN_DOCKERFILE_H
#define KILN_DOCKERFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln.h"

/* ===========================================================================
 * Pass 1: syntax (owned by dockerfile-parser/parse*.c, ast*.c)
 * ========================================================================= */

struct df_heredoc {
	char *name;      /* delimiter word, quotes removed */
	char *content;   /* body lines exactly as read, each with its line ending
	                  * (BuildKit's Heredoc.Content; "<<-" tabs NOT yet removed) */
	bool expand;     /* unquoted delimiter: variables expand in the body */
	bool chomp;      /* "<<-": leading tabs are to be stripped from body lines */
	int fd;          /* "3<<EOF": 3; 0 when no number was written */
};

/* One instruction.  Fields mirror BuildKit's parser.Node so that the dump
 * format can be reproduced exactly. */
struct df_node {
	char *name;          /* lowercase instruction: "from", "run", "onbuild", ... */
	char *original;      /* the instruction's text as BuildKit records it (Node.Original);
	                      * NULL for an ONBUILD trigger nested two or more deep */
	int start_line;      /* 1-based, inclusive */
	int end_line;
	int col;             /* 1-based column of the instruction keyword */
	kiln_strv flags;     /* "--from=build", "--link", as written, in order */
	kiln_strv args;      /* BuildKit's Next chain values, in order (ENV/LABEL as
	                      * key,value,sep triples; exec form: one per element) */
	bool json;           /* exec (JSON) form was used */
	struct df_heredoc *heredocs;
	size_t n_heredocs;
	struct df_node *sub; /* ONBUILD's trigger instruction, else NULL (its
	                      * heredocs are attached to the ONBUILD node, as in BuildKit) */
	char *comment;       /* comment lines directly above it, joined with "\n", or NULL */
};

struct df_ast {
	char *file;          /* name used in messages ("-" shown as "<stdin>") */
	char escape;         /* '\\' or '`' */
	char *syntax;        /* "# syntax=" directive value, or NULL */
	char *check;         /* "# check=" directive value, or NULL */
	struct df_node *nodes;
	size_t n_nodes;
	kiln_strv warnings;  /* "FILE:LINE:COL: message" for accepted-but-suspect input */
	/* The text as parsed, so pass 2 can point at the column of a flag. */
	char *text;
	size_t len;
	size_t *line_off;    /* offset of each physical line (line_off[0] = 0) */
	size_t n_lines;
	/* The text holds a NUL byte, or a JSON string decodes to one (BuildKit
	 * keeps both).  No C string can, so then every string of this tree holds
	 * NUL as the bytes C0 80 and a raw C0 byte as C0 81 (the dump and JSON
	 * writers undo it); pass 2 refuses such a tree at nul_line:nul_col. */
	bool nul;
	int nul_line, nul_col;
};

/* Parse Dockerfile text.  `file` is used in messages only.  Accepts what
 * BuildKit's parser (frontend/dockerfile/parser) accepts and fails where it
 * fails (bad directives, ENV/LABEL syntax, JSON arrays of non-strings,
 * unterminated heredocs, over-long lines, no instructions).  What BuildKit's
 * instructions.Parse rejects (unknown instructions and flags, argument
 * counts, --mount/--network/--security and HEALTHCHECK values, SHELL form,
 * ONBUILD triggers) is left to pass 2, df_plan_build. */
int df_parse(const char *file, const char *text, size_t len, struct df_ast **out, kiln_error **err);
/* Read and parse a file ("-" for stdin). */
int df_parse_file(const char *path, struct df_ast **out, kiln_error **err);
void df_ast_free(struct df_ast *ast);

/* The AST as JSON: {"escape","syntax","check","instructions":[{"instruction",
 * "flags","args","json","heredocs","original","start_line","end_line",...}]}. */
json_t *df_ast_to_json(const struct df_ast *ast);
/* BuildKit's Node.Dump() format, one line per instruction, "\n"-terminated;
 * *len (if non-NULL) gets its length, since an instruction word printed
 * unquoted may hold a NUL byte. */
char *df_ast_dump(const struct df_ast *ast, size_t *len);

/* encoding/csv reading one record with default options, as BuildKit reads
 * RUN --mount and buildx --secret (parse_check_values.c): the fields go to
 * *out; NULL on success, else the error text (static) with *errcol its
 * 1-based column, or 0 when there is none. */
const char *df_csv_fields(const char *s, kiln_strv *out, size_t *errcol);

/* ===========================================================================
 * Pass 2: semantics (owned by dockerfile-parser/expand*.c, plan*.c)
 * ========================================================================= */

/* Variable lookup for word expansion: returns the value or NULL if unset. */
typedef const char *(*df_lookup_fn)(void *ctx, const char *name);

/* Expand one word as Docker's shell lexer does (BuildKit ProcessWord): $v,
 * ${v}, ${v:-w} ${v-w} ${v:+w} ${v+w} ${v:?msg} ${v?msg}, ${v#p} ${v##p}
 * ${v%p} ${v%%p} ${v/p/r} ${v//p/r} (p: * ? and \-escapes), single and
 * double quotes, the escape character ('\\' or '`'); an escaped $ is
 * literal.  Whitespace is kept.  lookup may be NULL (nothing set).  Errors
 * (bad substitution, ${v:?msg} with v unset, bad pattern) go in *err
 * without a location; callers prefix FILE:LINE:COL. */
int df_expand_word(const char *word, char escape, df_lookup_fn lookup, void *ctx, char **out, kiln_error **err);
/* Like df_expand_word but splits the result into words on whitespace that
 * is neither quoted nor escaped (ProcessWords); appends them to *out. */
int df_expand_words(const char *word, char escape, df_lookup_fn lookup, void *ctx, kiln_strv *out, kiln_error **err);

struct df_kv {
	char *key;
	char *value;
};

enum df_kind {
	DF_FROM, DF_RUN, DF_CMD, DF_LABEL, DF_MAINTAINER, DF_EXPOSE, DF_ENV, DF_ADD, DF_COPY,
	DF_ENTRYPOINT, DF_VOLUME, DF_USER, DF_WORKDIR, DF_ARG, DF_ONBUILD, DF_STOPSIGNAL,
	DF_HEALTHCHECK, DF_SHELL,
};

/* Lowercase instruction name of a kind ("run"). */
const char *df_kind_name(enum df_kind kind);

/* A RUN --mount, parsed once here (BuildKit's parseMount after expansion,
 * then the defaults its dispatch applies); the builder reads only this. */
enum df_mount_type { DF_MOUNT_BIND, DF_MOUNT_CACHE, DF_MOUNT_TMPFS, DF_MOUNT_SECRET, DF_MOUNT_SSH };
enum df_mount_sharing { DF_SHARING_SHARED, DF_SHARING_PRIVATE, DF_SHARING_LOCKED };
/* BuildKit's names of them ("bind", "locked"), from the one --mount
 * vocabulary (mount_spec.c). */
const char *df_mount_type_name(enum df_mount_type t);
const char *df_mount_sharing_name(enum df_mount_sharing s);
struct df_mount {
	enum df_mount_type type;
	char *from;          /* from= as written (a stage or an image), NULL: the build
	                      * context (bind), an empty directory (cache) */
	int from_stage;      /* the stage `from` names, else -1 */
	char *source;        /* source=/src=, NULL if not given */
	char *target;        /* target=/dst=/destination=, expanded; NULL if not given.
	                      * secret: /run/secrets/ID by default (NULL with env= and
	                      * no target); ssh: /run/buildkit/ssh_agent.N by default
	                      * (N: the mount's place among the step's ssh mounts) */
	char *id;            /* cache: id= or else the target; secret: source=, id= or
	                      * the target's base name; ssh: id= or "default" */
	char *env;           /* env= as given, or NULL (read for every type, as BuildKit
	                      * does; secret: the secret also as that variable) */
	bool readonly;       /* ro/rw as given, else bind, secret, ssh: true */
	bool required;       /* secret, ssh: a missing one fails the step */
	enum df_mount_sharing sharing; /* cache (default shared) */
	uint64_t size;       /* tmpfs size= in bytes (go-units RAMInBytes), 0: none */
	uint32_t mode, uid, gid; /* cache: 0755 0 0, secret: 0400 0 0, ssh: 0600 0 0
	                      * unless given; bind and tmpfs take none */
};

/* One instruction of a stage, after expansion.  Expanded, as BuildKit does:
 * ADD/COPY sources, dest, --chown, --chmod, --checksum, --exclude and
 * expandable heredoc bodies; ENV and LABEL keys and values; ARG names and
 * defaults; EXPOSE (split into words); USER, WORKDIR, STOPSIGNAL, VOLUME;
 * RUN --mount values (except from=).  Left as written: RUN, CMD,
 * ENTRYPOINT, SHELL, HEALTHCHECK (their shell expands), MAINTAINER, ONBUILD,
 * COPY --from. */
struct df_step {
	enum df_kind kind;
	const struct df_node *node;  /* where it came from (lines, original text) */
	kiln_strv args;              /* exec form: the argv; RUN/CMD/ENTRYPOINT shell form:
	                              * one string; COPY/ADD: sources..., dest (heredoc
	                              * sources as "<<NAME"); ENV/LABEL/ARG: "K=V" (ARG
	                              * without value: "K"); HEALTHCHECK: "NONE" or "CMD"
	                              * then the command; ONBUILD: the trigger text */
	bool exec_form;
	struct df_kv *flags;         /* in order, name without "--" → value ("" if none) */
	size_t n_flags;
	struct df_kv *kvs;           /* ENV / LABEL / ARG pairs (ARG: the value in effect
	                              * after --build-arg and global defaults; NULL if none) */
	size_t n_kvs;
	struct df_heredoc *heredocs; /* content with "<<-" tabs removed; COPY/ADD: also
	                              * expanded when heredoc.expand (RUN: as written) */
	size_t n_heredocs;
	kiln_strv env;               /* "K=V" in effect: the base image's env (see
	                              * image_config; else PATH), ENV and ARG values
	                              * in scope, last definition wins, inherited from a
	                              * FROM <stage>; RUN also gets the proxy build args */
	char *workdir;               /* WORKDIR in effect (relative ones joined onto the
	                              * previous, or "/"), NULL = unknown (image's) */
	char *user;                  /* USER in effect, NULL = unknown (image's) */
	kiln_strv shell;             /* SHELL in effect, empty = default (/bin/sh -c) */
	int from_stage;              /* COPY --from=<stage|index> or RUN --mount from=<stage>:
	                              * the stage index (the first, for several mounts), else -1 */
	char *from_image;            /* COPY --from=<image> that names no stage, else NULL */
	struct df_mount *mounts;     /* RUN: its --mount flags, in order */
	size_t n_mounts;
};

struct df_stage {
	int index;
	const struct df_node *node;  /* its FROM */
	char *name;                  /* "AS name" (lowercased), or NULL */
	char *base;                  /* expanded FROM image: a reference, "scratch", or a stage name */
	int base_stage;              /* index of the stage FROM refers to, or -1 */
	char *platform;              /* expanded --platform, or NULL */
	bool reachable;              /* in the build order; steps are only expanded for these */
	struct df_step *steps;
	size_t n_steps;
	int *deps;                   /* stages this one needs (FROM, COPY --from, RUN --mount
	                              * from=), ascending, no duplicates */
	size_t n_deps;
};

/* What a base image's config contributes to a stage (filled by the caller's
 * image_config hook; df_plan_build frees the fields). */
struct df_image_config {
	kiln_strv env;                   /* "K=V" */
	char *workdir;                   /* or NULL */
	char *user;                      /* or NULL */
	kiln_strv shell;                 /* empty = /bin/sh -c */
	kiln_strv onbuild;               /* the image's ONBUILD triggers ("RUN make"): they
	                                  * become the stage's first steps, as in BuildKit */
};

struct df_plan_opts {
	const struct df_kv *build_args;  /* --build-arg K=V */
	size_t n_build_args;
	const char *target;              /* stage name (case-insensitive) or index; NULL = last */
	const char *platform;            /* target platform, "linux/amd64" when NULL */
	const char *build_platform;      /* "linux/amd64" when NULL */
	/* Optional: the config of base image `ref` (expanded FROM, never
	 * "scratch" or a stage) for `platform`, called once per built stage.
	 * Its env, WORKDIR, USER and SHELL then start the stage, as in BuildKit
	 * (PATH added when the image has none).  Without it an image is taken
	 * to set only the default PATH, like scratch. */
	int (*image_config)(void *ctx, const char *ref, const char *platform, struct df_image_config *out,
			    kiln_error **err);
	void *image_ctx;
};

struct df_plan {
	struct df_stage *stages;
	size_t n_stages;
	int target;                  /* index of the target stage */
	int *order;                  /* stages to build, dependencies first */
	size_t n_order;
	struct df_kv *global_args;   /* ARGs before the first FROM and the predefined
	                              * platform ARGs, with their values (NULL = no value) */
	size_t n_global_args;
	kiln_strv warnings;          /* "FILE:LINE:COL: ..." e.g. build args no ARG consumed */
	struct df_ast **triggers;    /* parsed base-image ONBUILD triggers (their steps point
	                              * here; lines are those of the FROM) */
	size_t n_triggers;
};

/* The semantic pass.  First what BuildKit's instructions.Parse rejects before
 * expanding anything, over every instruction of every stage (unknown
 * instructions, argument counts, unknown/duplicate/valueless flags, bad
 * --mount/--network/--security and HEALTHCHECK options, SHELL not in JSON
 * form, ONBUILD triggers: a trigger's own problems are warnings) and a tree
 * holding NUL; then expansion.  Errors: "FILE:LINE:COL: message" (KILN_E_INVALID),
 * KILN_E_NOTFOUND for an unknown --target, KILN_E_USAGE for bad options. */
int df_plan_build(const struct df_ast *ast, const struct df_plan_opts *opts, struct df_plan **out, kiln_error **err);
/* {"target","target_name","order","global_args","stages":[{"index","name","base",
 * "base_stage","platform","line","reachable","deps","steps":[{"instruction","line",
 * "end_line","original","args","exec_form","flags","kvs","heredocs","env","workdir",
 * "user","shell","from_stage","from_image","mounts"}]}],"warnings"}; see docs/dockerfile-plan.md. */
json_t *df_plan_to_json(const struct df_plan *plan);
void df_plan_free(struct df_plan *plan);

#endif
