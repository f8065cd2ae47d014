/* internal.h — what the file server's files (chunkfs*.c) share beyond the
 * stage's contract (distrib.h): its paths, its log and the page-cache warm-up. */
#ifndef KILN_DISTRIB_INTERNAL_H
#define KILN_DISTRIB_INTERNAL_H

#include "distrib/distrib.h"

/* $KILN_HOME/chunkfs, a name in it, templates/HEX.json (chunkfs_ctl.c). */
char *dist_cfs_dir(void);
char *dist_cfs_sub(const char *name);
char *dist_cfs_record_path(const char *hex);
bool dist_cfs_valid_hex(const char *s);
/* A FUSE mount at mnt (stale: its server died: ENOTCONN). */
bool dist_cfs_is_mounted(const char *mnt, bool *stale);
/* One line in the server's log ($KILN_HOME/chunkfs/log), time-stamped. */
void dist_cfs_logf(const char *fmt, ...) KILN_PRINTF(1, 2);
/* Read the working set of part p (the memory) through path, the part's file
 * on the server's own mount, in the background; chunks not yet in cs are
 * waited for a while (the lazy pull is fetching them).  KILN_CHUNKFS_WARM=0
 * turns it off. */
void dist_cfs_warm_start(const char *path, const char *hex, const struct dist_tmpl_part *p, dist_chunks *cs);

#endif
