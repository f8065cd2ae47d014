/* sandbox_api.h — the sandbox service's HTTP frontends (internal to
 * service/): E2B's control plane (sandbox_api.c) and envd's plane
 * (sandbox_envd.c) over runtime/'s rt_host, mounted as one route set on
 * `kiln serve`'s listener (docs/sandbox-api.md). */
#ifndef KILN_SERVICE_SANDBOX_API_H
#define KILN_SERVICE_SANDBOX_API_H

#include "kiln.h"
#include "registry/registry.h"
#include "runtime/runtime.h"
#include "service/e2b.h"
#include "service/service.h"

#define SBX_ENVD_PORT 49983
#define SBX_ENVD_VERSION "0.6.13"     /* what kiln's envd plane implements (docs/sandbox-api.md) */
#define SBX_CLIENT_ID "6532622b"       /* E2B's constant, still required by the Python SDK */
#define SBX_MAX_CONTROL_BODY (1u << 20)

struct svc_sandboxes {
	reg_server *srv;
	rt_host *host;
	e2b *templates;          /* E2B's template names, when --build runs here too (else NULL) */
	char *domain;            /* E2B's "domain": Host routing <port>-<id>.<domain> */
	char *self;              /* this server's registry, HOST:PORT (templates built here) */
	uint64_t max_upload;     /* bytes of one POST /files */
	struct reg_routes routes;
	kiln_strv pool;
	int pool_size;
	struct {                 /* for /metrics (sandbox_api.c) */
		uint64_t starts[2];                /* restored, from the pool */
		struct reg_histogram start[2];     /* request to a sandbox answering */
		uint64_t misses;                   /* restored while pools are kept */
		uint64_t refused[3];               /* team limit, host limit, unknown template */
		uint64_t failed;                   /* anything else */
	} metrics;
	struct reg_observer observer;
};

enum sbx_plane { SBX_CONTROL, SBX_ENVD };

/* A request in flight. */
struct sbx_req {
	enum sbx_plane plane;
	char *sandbox;           /* envd: the id routed to */
	struct svc_body body;    /* its limit by plane (svc_body: the core's rule) */
};

/* envd's plane (sandbox_envd.c): whether r is for it (the id it names into
 * *id, NULL when none is named), and the answer once the body is in. */
bool sbx_envd_match(struct svc_sandboxes *s, reg_req *r, char **id);
void sbx_envd_serve(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q);
/* The sandbox's own port of Host PORT-ID.DOMAIN: 0 when r is not for one
 * (envd's port is envd's plane). */
unsigned sbx_port_of(struct svc_sandboxes *s, reg_req *r);
/* Its answer (sandbox_ports.c), through sb (held by the caller). */
void sbx_port_serve(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q, rt_sandbox *sb, unsigned port);
/* The control plane's answer (sandbox_api.c). */
void sbx_control_serve(struct svc_sandboxes *s, reg_req *r, struct sbx_req *q);

#endif
