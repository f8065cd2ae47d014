/* internal.h — what the build service's files share and nothing outside
 * sees: the service's state, the queue database (sqlite or PostgreSQL), the
 * workers and the HTTP API of kiln's own client. */
#ifndef KILN_SERVICE_INTERNAL_H
#define KILN_SERVICE_INTERNAL_H

#include "service/service.h"

#endif
