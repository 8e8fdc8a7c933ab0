/*
 * api/service/ui.h: the incident-review page (ui/README.md), built into the binary
 * by scripts/embed-ui.sh and served at /ui/ on the API listener, with
 * headers that keep it from running anything but its own files.
 */
#ifndef API_UI_H
#define API_UI_H

#include <stdbool.h>
#include <stddef.h>

#include "api/service/request.h"

struct api_ui_file {
	const char *name;         /* served at /ui/<name> */
	const char *content_type; /* with its charset for text */
	size_t len;
	const unsigned char *bytes;
};

/* The table scripts/embed-ui.sh generates; "index.html" among them. */
extern const struct api_ui_file api_ui_files[];
extern const size_t api_ui_file_count;

/**
 * Replies for @p path (no query) when it is /ui or under /ui/: the file,
 * a redirect from /ui to /ui/, 404 or 405, each with the page's security
 * headers. No token is asked: the files are public, the data the page
 * shows comes from the API with the user's own token.
 * @return false, having done nothing, for any other path
 */
bool api_ui_answer(struct api_request *req, const char *path);

#endif
