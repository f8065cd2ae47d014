/* event.h — what a build reports as it goes (a step begins, ends with its
 * cache hit and time split, output, the builder VM, done): handed to
 * build_options' on_event, and by remote/ for a build on a server. */
#ifndef KILN_BUILDER_EVENT_H
#define KILN_BUILDER_EVENT_H

#include <stdbool.h>
#include <stddef.h>

/* Where the time of a RUN step went (filled by the executor). */
struct build_run_stats {
	bool booted;          /* this step started the stage's VM */
	bool restored;        /* ... from the builder VM snapshot (boot_ms: the restore) */
	bool base_restored;   /* ... from its snapshot with the stage's base already in it */
	double ext4_ms;       /* the stage as an ext4 image (cold boot only) */
	double boot_ms;       /* VM start to agent ready (boot only) */
	double sync_ms;       /* layers made on the host since the last RUN, into the VM */
	double exec_ms;       /* the command, with its mounts set up and torn down */
	double capture_ms;    /* the step's changes back to the host, as a layer */
};

enum build_event_kind { BUILD_EV_STEP, BUILD_EV_STEP_DONE, BUILD_EV_DONE, BUILD_EV_OUTPUT, BUILD_EV_VM };

struct build_event {
	enum build_event_kind kind;
	int step, total;            /* 1-based over the stages built (FROM counts) */
	const char *stage;          /* stage name, or its index as text */
	const char *instruction;    /* expanded text */
	const char *file;
	int line;
	bool has_cache;             /* the step has a cache key (layer steps) */
	bool cached;                /* a hit */
	double seconds;
	const char *digest;         /* BUILD_EV_DONE: manifest digest */
	const char *template_digest; /* BUILD_EV_DONE: the template's, or NULL */
	const char *data;           /* BUILD_EV_OUTPUT: a chunk of RUN output */
	size_t len;
	const struct build_run_stats *run; /* BUILD_EV_STEP_DONE of a RUN that ran, BUILD_EV_VM
	                            * (the stage's builder VM booted): the time split */
};

#endif
