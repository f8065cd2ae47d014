/* ui.c — the dashboard's static files (registry/ui/, embedded at build time by
 * ui-embed.sh into build/gen/ui_files.h) served at /ui/, with the headers that
 * keep them safe: a strict Content-Security-Policy (no inline script or style,
 * nothing from another origin, no framing), nosniff, no referrer.  Their data
 * comes from the JSON APIs with the token in a header (docs/dashboard.md). */
#include <string.h>

#include "registry/internal.h"

struct ui_file {
	const char *name;
	const unsigned char *data;
	size_t len;
};

#include "ui_files.h"

#define UI_CSP "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self';" \
	       " base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static const char *type_of(const char *name)
{
	const char *dot = strrchr(name, '.');

	if (dot && strcmp(dot, ".html") == 0)
		return "text/html; charset=utf-8";
	if (dot && strcmp(dot, ".css") == 0)
		return "text/css; charset=utf-8";
	if (dot && strcmp(dot, ".js") == 0)
		return "text/javascript; charset=utf-8";
	if (dot && strcmp(dot, ".svg") == 0)
		return "image/svg+xml";
	return "application/octet-stream";
}

static void secure(reg_req *r)
{
	MHD_add_response_header(r->resp, "Content-Security-Policy", UI_CSP);
	MHD_add_response_header(r->resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r->resp, "X-Frame-Options", "DENY");
	MHD_add_response_header(r->resp, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(r->resp, "Cache-Control", "no-cache");
}

void reg_ui_handle(reg_req *r)
{
	const char *name;

	/* The server's root and /ui lead to the dashboard (a browser opening the
	 * address sees it, not a 404). */
	if (strcmp(r->url, "/") == 0 || strcmp(r->url, "/ui") == 0) {
		reg_respond(r, 302, "", 0, NULL);
		MHD_add_response_header(r->resp, "Location", "/ui/");
		secure(r);
		return;
	}
	name = r->url + 4;
	if (*name == '\0')
		name = "index.html";
	for (size_t i = 0; i < sizeof(ui_files) / sizeof(ui_files[0]); i++) {
		if (strcmp(ui_files[i].name, name) == 0) {
			reg_respond(r, 200, ui_files[i].data, ui_files[i].len, type_of(name));
			secure(r);
			return;
		}
	}
	reg_error(r, 404, "NOT_FOUND", "no such file of the dashboard");
	secure(r);
}
