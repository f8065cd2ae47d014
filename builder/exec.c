/* exec.c — executors for RUN steps.  Only the table for "no microVM" lives
 * here for now: it refuses RUN with a message that says why, so a Dockerfile
 * without RUN builds fully on the host and one with RUN fails at that step. */
#include "builder/builder.h"

static int run_none(void *ctx, build_exec_session **session, const struct build_run_request *req, struct build_layer *out, kiln_error **err)
{
	return kiln_err(err, KILN_E_GENERIC, "RUN needs the builder microVM: not available yet");
}

const struct build_executor_ops build_executor_none = {
	.name = "none",
	.run = run_none,
};
