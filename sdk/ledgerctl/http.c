/*
 * sdk/ledgerctl/http.c: ledgerctl's libcurl transport. An operator runs
 * ledgerctl during an incident, when ledgerd or its database may be the
 * thing that is down, so every call is bounded (3 s to connect, 10 s in
 * all, 16 MiB of answer) and a failure says which of those it was.
 */
#include "sdk/ledgerctl/http.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "ledger/common/buf.h"

#ifndef LEDGER_VERSION
#define LEDGER_VERSION "unknown"
#endif

#define CONNECT_TIMEOUT_MS 3000L
#define TOTAL_TIMEOUT_MS 10000L

struct ledgerctl_http {
	CURL *curl;
	char *base;                   /* the base URL without its trailing '/' */
	struct curl_slist *get_hdrs;  /* Accept, and Authorization when a token was given */
	struct curl_slist *post_hdrs; /* the same plus Content-Type */
	char errbuf[CURL_ERROR_SIZE]; /* libcurl's last reason */
};

/* The answer body as it arrives; refused past the limit. */
struct sink {
	struct ledger_buf buf;
	bool too_large;
};

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;

	if (len > LEDGERCTL_HTTP_MAX_BODY - s->buf.len) {
		s->too_large = true;
		return 0; /* libcurl stops with CURLE_WRITE_ERROR */
	}
	ledger_buf_append(&s->buf, data, len);
	return s->buf.oom ? 0 : len;
}

/* Wipes every header before freeing, since one of them carries the token. */
static void free_headers(struct curl_slist *list)
{
	for (struct curl_slist *n = list; n != NULL; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(list);
}

/* Appends @p line to @p *list; false when out of memory (the list is kept). */
static bool add_header(struct curl_slist **list, const char *line)
{
	struct curl_slist *next = curl_slist_append(*list, line);

	if (next == NULL)
		return false;
	*list = next;
	return true;
}

static enum ledger_err build_headers(struct ledgerctl_http *h, const char *token)
{
	struct ledger_buf auth = LEDGER_BUF_INIT;
	enum ledger_err rc = LEDGER_ERR_NOMEM;
	bool ok = true;

	if (token != NULL) {
		ledger_buf_puts(&auth, "Authorization: Bearer ");
		ledger_buf_puts(&auth, token);
		if (auth.oom)
			goto out;
		ok = add_header(&h->get_hdrs, auth.data) && add_header(&h->post_hdrs, auth.data);
	}
	/* Expect: left empty so a large body is not held back a second for 100-continue. */
	ok = ok && add_header(&h->get_hdrs, "Accept: application/json") &&
	     add_header(&h->post_hdrs, "Accept: application/json") &&
	     add_header(&h->post_hdrs, "Content-Type: application/json") &&
	     add_header(&h->post_hdrs, "Expect:");
	if (ok)
		rc = LEDGER_OK;
out:
	if (auth.data != NULL)
		explicit_bzero(auth.data, auth.len);
	ledger_buf_free(&auth);
	return rc;
}

enum ledger_err ledgerctl_http_open(const char *base_url, const char *token,
				    struct ledgerctl_http **out)
{
	struct ledgerctl_http *h = NULL;
	size_t len = strlen(base_url);
	enum ledger_err rc = LEDGER_ERR_NOMEM;
	bool global = false;

	*out = NULL;
	if (strncasecmp(base_url, "http://", 7) != 0 && strncasecmp(base_url, "https://", 8) != 0)
		return LEDGER_ERR_INVALID;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return LEDGER_ERR_INTERNAL;
	global = true;
	h = calloc(1, sizeof(*h));
	if (h == NULL)
		goto out;
	while (len > 0 && base_url[len - 1] == '/')
		len--;
	h->base = strndup(base_url, len);
	if (h->base == NULL)
		goto out;
	rc = build_headers(h, token);
	if (rc != LEDGER_OK)
		goto out;
	rc = LEDGER_ERR_INTERNAL;
	h->curl = curl_easy_init();
	if (h->curl == NULL)
		goto out;
	if (curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_PATH_AS_IS, 1L) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_TIMEOUT_MS, TOTAL_TIMEOUT_MS) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_MAXFILESIZE_LARGE,
			     (curl_off_t)LEDGERCTL_HTTP_MAX_BODY) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_USERAGENT, "ledgerctl/" LEDGER_VERSION) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_ERRORBUFFER, h->errbuf) != CURLE_OK ||
	    curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK)
		goto out;
	/* Redirects stay off (the default): the token must not follow one elsewhere. */
	*out = h;
	h = NULL;
	global = false;
	rc = LEDGER_OK;
out:
	if (h != NULL) {
		global = false; /* close releases it */
		ledgerctl_http_close(h);
	}
	if (global)
		curl_global_cleanup();
	return rc;
}

void ledgerctl_http_close(struct ledgerctl_http *h)
{
	if (h == NULL)
		return;
	if (h->curl != NULL)
		curl_easy_cleanup(h->curl);
	free_headers(h->get_hdrs);
	free_headers(h->post_hdrs);
	free(h->base);
	free(h);
	curl_global_cleanup();
}

static enum ledgerctl_http_failure classify(CURLcode code, const struct sink *s)
{
	switch (code) {
	case CURLE_OK:
		return LEDGERCTL_HTTP_ANSWERED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return LEDGERCTL_HTTP_UNREACHABLE;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return LEDGERCTL_HTTP_BAD_URL;
	case CURLE_FILESIZE_EXCEEDED:
		return LEDGERCTL_HTTP_TOO_LARGE;
	case CURLE_WRITE_ERROR:
		return s->too_large ? LEDGERCTL_HTTP_TOO_LARGE : LEDGERCTL_HTTP_FAILED;
	default:
		return LEDGERCTL_HTTP_FAILED;
	}
}

enum ledger_err ledgerctl_http_send(struct ledgerctl_http *h, const char *path, const char *body,
				    size_t body_len, struct ledgerctl_answer *answer)
{
	struct ledger_buf url = LEDGER_BUF_INIT;
	struct sink s = {LEDGER_BUF_INIT, false};
	enum ledger_err rc = LEDGER_ERR_NOMEM;
	CURLcode code;
	bool set;

	memset(answer, 0, sizeof(*answer));
	ledger_buf_puts(&url, h->base);
	ledger_buf_puts(&url, path);
	if (url.oom)
		goto out;
	h->errbuf[0] = '\0';
	set = curl_easy_setopt(h->curl, CURLOPT_URL, url.data) == CURLE_OK &&
	      curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &s) == CURLE_OK;
	if (body == NULL) {
		set = set && curl_easy_setopt(h->curl, CURLOPT_HTTPGET, 1L) == CURLE_OK &&
		      curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, h->get_hdrs) == CURLE_OK;
	} else {
		set = set && curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, body) == CURLE_OK &&
		      curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE_LARGE,
				       (curl_off_t)body_len) == CURLE_OK &&
		      curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, h->post_hdrs) == CURLE_OK;
	}
	if (!set) {
		answer->failure = LEDGERCTL_HTTP_FAILED;
		snprintf(answer->error, sizeof(answer->error), "libcurl refused an option");
		rc = LEDGER_OK;
		goto out;
	}
	code = curl_easy_perform(h->curl);
	if (s.buf.oom)
		goto out;
	answer->failure = classify(code, &s);
	if (answer->failure != LEDGERCTL_HTTP_ANSWERED) {
		snprintf(answer->error, sizeof(answer->error), "%s",
			 h->errbuf[0] != '\0' ? h->errbuf : curl_easy_strerror(code));
		rc = LEDGER_OK;
		goto out;
	}
	if (curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &answer->status) != CURLE_OK)
		answer->status = 0;
	answer->body = ledger_buf_steal(&s.buf, &answer->len);
	if (answer->body != NULL)
		rc = LEDGER_OK;
out:
	ledger_buf_free(&url);
	ledger_buf_free(&s.buf);
	return rc;
}

void ledgerctl_answer_clear(struct ledgerctl_answer *a)
{
	if (a == NULL)
		return;
	free(a->body);
	memset(a, 0, sizeof(*a));
}

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

char *ledgerctl_http_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	struct ledger_buf out = LEDGER_BUF_INIT;

	/* "." and ".." are valid ids but dot segments of a path: never send them bare */
	bool dots = strcmp(s, ".") == 0 || strcmp(s, "..") == 0;

	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
		if (unreserved(*p) && !dots) {
			ledger_buf_putc(&out, (char)*p);
		} else {
			ledger_buf_putc(&out, '%');
			ledger_buf_putc(&out, hex[*p >> 4]);
			ledger_buf_putc(&out, hex[*p & 0xf]);
		}
	}
	return ledger_buf_steal(&out, NULL);
}
