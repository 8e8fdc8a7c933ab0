/*
 * api/service/ui.c: serves the incident-review page from the table
 * scripts/embed-ui.sh builds out of ui/. The page talks to the API with
 * the token its user pasted; what this file adds is the files and the
 * headers under which a browser runs them: only this origin's own script
 * and style, nothing inline, no framing, no referrer, no sniffing.
 */
#include "api/service/ui.h"

#include <string.h>

#include "api/service/reply.h"

/* Every /ui answer carries these, the errors too. */
#define SECURITY_HEADERS                                                                           \
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "       \
	"img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "                \
	"frame-ancestors 'none'\r\n"                                                               \
	"X-Content-Type-Options: nosniff\r\n"                                                      \
	"Referrer-Policy: no-referrer\r\n"                                                         \
	"X-Frame-Options: DENY\r\n"                                                                \
	"Cross-Origin-Opener-Policy: same-origin\r\n"                                              \
	"Cache-Control: no-cache\r\n"

static const struct api_ui_file *find(const char *name)
{
	for (size_t i = 0; i < api_ui_file_count; i++) {
		if (strcmp(api_ui_files[i].name, name) == 0)
			return &api_ui_files[i];
	}
	return NULL;
}

bool api_ui_answer(struct api_request *req, const char *path)
{
	const char *method = req->head->method;
	const struct api_ui_file *f = NULL;

	if (strcmp(path, "/ui") != 0 && strncmp(path, "/ui/", 4) != 0)
		return false;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		api_reply_error(req, 405, "method_not_allowed", "this path takes GET, HEAD");
		req->reply.allow = "GET, HEAD";
	} else if (strcmp(path, "/ui") == 0) {
		api_reply_bytes(req, 308, "text/plain; charset=utf-8", "/ui/\n", 5);
		req->reply.headers = SECURITY_HEADERS "Location: /ui/\r\n";
		return true;
	} else if ((f = find(path[4] == '\0' ? "index.html" : path + 4)) == NULL) {
		api_reply_error(req, 404, "not_found", "no such path");
	} else {
		api_reply_bytes(req, 200, f->content_type, f->bytes, f->len);
	}
	req->reply.headers = SECURITY_HEADERS;
	return true;
}
