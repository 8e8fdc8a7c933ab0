/*
 * sdk/c/client.c: the C client's transport. A pool of libcurl handles lets
 * any number of threads share one client while each handle keeps its
 * connection alive between calls. A call that gets no answer, or a 503, is
 * re-sent unchanged until its time runs out: the API makes every POST
 * idempotent under such a retry, so a lost answer is never a lost call.
 * Every call is bounded: 3 s to connect, timeout_ms in all, and
 * LEDGER_CLIENT_MAX_ANSWER bytes of answer. An https URL is verified
 * always (chain and host name), against the CA file when one is given.
 * A call made in a trace carries it to ledgerd as traceparent and
 * tracestate headers; a client takes a reference of the process's tracer
 * (ledger/common/trace.h) for as long as it is open.
 */
#include "sdk/c/client_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include <curl/curl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>


#ifndef LEDGER_VERSION
#define LEDGER_VERSION "unknown"
#endif

#define DEFAULT_TIMEOUT_MS 10000u
#define DEFAULT_RETRY_MS 30000u
#define DEFAULT_COMPLETE_RETRY_MS 300000u
#define CONNECT_TIMEOUT_MS 3000L
#define BACKOFF_FIRST_MS 50u
#define BACKOFF_CAP_MS 1000u
#define ANSWER_MAX_DEPTH 64

struct client_conn {
	CURL *curl;
	struct client_conn *next;
	char errbuf[CURL_ERROR_SIZE];
};

/* The answer body as it arrives; refused past the limit. */
struct sink {
	struct ledger_buf buf;
	bool too_large;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

/* libcurl's global state is set up once per process and kept: a library
 * cannot know when its last user is gone, and cleanup is not thread-safe. */
static void init_curl(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

const char *ledger_client_version(void)
{
	return LEDGER_VERSION;
}

const char *ledger_client_strerror(enum ledger_client_err err)
{
	switch (err) {
	case LEDGER_CLIENT_OK:
		return "ok";
	case LEDGER_CLIENT_ERR_INVALID:
		return "invalid argument";
	case LEDGER_CLIENT_ERR_NOMEM:
		return "out of memory";
	case LEDGER_CLIENT_ERR_UNAVAILABLE:
		return "ledgerd unavailable";
	case LEDGER_CLIENT_ERR_REFUSED:
		return "refused by ledgerd";
	case LEDGER_CLIENT_ERR_PROTOCOL:
		return "unexpected answer from ledgerd";
	case LEDGER_CLIENT_ERR_INTERNAL:
		return "internal error";
	}
	return "unknown error";
}

void ledger_client_error_clear(struct ledger_client_error *e)
{
	if (e == NULL)
		return;
	free(e->body);
	memset(e, 0, sizeof(*e));
}

void client_error_set(struct ledger_client_error *e, const char *code, const char *fmt, ...)
{
	va_list ap;

	if (e == NULL)
		return;
	ledger_client_error_clear(e);
	snprintf(e->code, sizeof(e->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

/* Wipes every header before freeing, since one of them carries the token. */
static void free_headers(struct curl_slist *list)
{
	for (struct curl_slist *n = list; n != NULL; n = n->next)
		explicit_bzero(n->data, strlen(n->data));
	curl_slist_free_all(list);
}

static bool add_header(struct curl_slist **list, const char *line)
{
	struct curl_slist *next = curl_slist_append(*list, line);

	if (next == NULL)
		return false;
	*list = next;
	return true;
}

/* Authorization (when a token is given) and Accept on every call; a body's
 * Content-Type, and an empty Expect so a large body is not held back
 * waiting for 100-continue, on POSTs only. */
static bool build_headers(struct ledger_client *c, const char *token)
{
	struct ledger_buf auth = LEDGER_BUF_INIT;
	bool ok = true;

	if (token != NULL) {
		ledger_buf_puts(&auth, "Authorization: Bearer ");
		ledger_buf_puts(&auth, token);
		ok = !auth.oom && add_header(&c->get_headers, auth.data) &&
		     add_header(&c->post_headers, auth.data);
	}
	ok = ok && add_header(&c->get_headers, "Accept: application/json") &&
	     add_header(&c->post_headers, "Accept: application/json") &&
	     add_header(&c->post_headers, "Content-Type: application/json") &&
	     add_header(&c->post_headers, "Expect:");
	if (auth.data != NULL)
		explicit_bzero(auth.data, auth.len);
	ledger_buf_free(&auth);
	return ok;
}

/* Says why a CA file cannot be used; its failure is TLS, as a refused certificate is. */
static __attribute__((format(printf, 2, 3))) void ca_file_error(struct ledger_client_error *err,
								const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return;
	ledger_client_error_clear(err);
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	err->failure = LEDGER_CLIENT_FAILURE_TLS;
}

enum ledger_client_err ledger_client_ca_file_check(const char *path,
						   struct ledger_client_error *err)
{
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_INVALID;
	FILE *f = NULL;
	BIO *bio = NULL;
	X509 *cert = NULL;
	struct stat st;
	unsigned long last;
	int n = 0;

	if (path == NULL || path[0] == '\0') {
		ca_file_error(err, "the CA file has no name");
		goto out;
	}
	f = fopen(path, "re");
	if (f == NULL) {
		ca_file_error(err, "cannot read the CA file %s: %s", path, strerror(errno));
		goto out;
	}
	if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
		ca_file_error(err, "the CA file %s is not a regular file", path);
		goto out;
	}
	bio = BIO_new_fp(f, BIO_NOCLOSE);
	if (bio == NULL) {
		rc = LEDGER_CLIENT_ERR_NOMEM;
		goto out;
	}
	/* The same reader OpenSSL's own loading takes PEM blocks with; the text
	 * between blocks is skipped, and the end of the file is "no start line". */
	ERR_clear_error();
	while ((cert = PEM_read_bio_X509_AUX(bio, NULL, NULL, NULL)) != NULL) {
		X509_free(cert);
		n++;
	}
	last = ERR_peek_last_error();
	if (last != 0 && ERR_GET_REASON(last) != PEM_R_NO_START_LINE) {
		const char *why = ERR_reason_error_string(last);

		ca_file_error(err, "the CA file %s holds a certificate that cannot be read (%s)",
			      path, why != NULL ? why : "a bad PEM block");
		goto out;
	}
	if (n == 0) {
		ca_file_error(err, "the CA file %s holds no PEM certificate", path);
		goto out;
	}
	rc = LEDGER_CLIENT_OK;
out:
	ERR_clear_error(); /* this thread's queue: nothing of it is anyone else's concern */
	BIO_free(bio);
	if (f != NULL)
		fclose(f);
	return rc;
}

enum ledger_client_err client_open(const struct ledger_client_options *opts,
					  struct ledger_client **out)
{
	struct ledger_client *c = NULL;
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_NOMEM;
	size_t len;

	if (out == NULL)
		return LEDGER_CLIENT_ERR_INVALID;
	*out = NULL;
	if (opts == NULL || opts->url == NULL ||
	    (opts->token != NULL &&
	     (opts->token[0] == '\0' || strpbrk(opts->token, "\r\n") != NULL)) ||
	    (strncasecmp(opts->url, "http://", 7) != 0 &&
	     strncasecmp(opts->url, "https://", 8) != 0))
		return LEDGER_CLIENT_ERR_INVALID;
	if (opts->ca_file != NULL) {
		enum ledger_client_err checked = ledger_client_ca_file_check(opts->ca_file, NULL);

		if (checked != LEDGER_CLIENT_OK)
			return checked;
	}
	pthread_once(&curl_once, init_curl);
	if (curl_init_rc != CURLE_OK)
		return LEDGER_CLIENT_ERR_INTERNAL;

	c = calloc(1, sizeof(*c));
	if (c == NULL)
		goto out;
	pthread_mutex_init(&c->lock, NULL);
	len = strlen(opts->url);
	while (len > 0 && opts->url[len - 1] == '/')
		len--;
	c->base = strndup(opts->url, len);
	if (c->base == NULL)
		goto out;
	c->timeout_ms = opts->timeout_ms != 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
	c->retry_ms = opts->retry_ms != 0 ? opts->retry_ms : DEFAULT_RETRY_MS;
	c->complete_retry_ms =
		opts->complete_retry_ms != 0 ? opts->complete_retry_ms : DEFAULT_COMPLETE_RETRY_MS;
	c->max_result_bytes = opts->max_result_bytes != 0 ? opts->max_result_bytes
							  : LEDGER_CLIENT_MAX_RESULT_DEFAULT;
	if (opts->no_retry) {
		/* A retry budget of 0 sends a call once. */
		c->retry_ms = 0;
		c->complete_retry_ms = 0;
	}
	c->user_agent = strdup(opts->user_agent != NULL ? opts->user_agent
							: "ledger_client/" LEDGER_VERSION);
	if (c->user_agent == NULL || !build_headers(c, opts->token))
		goto out;
	if (opts->ca_file != NULL && (c->ca_file = strdup(opts->ca_file)) == NULL)
		goto out;
	/*
	 * The program's tracer, configured by OTEL_* alone: a program that links
	 * the library gets tracing without a call of its own. Its name is the
	 * program's (OTEL_SERVICE_NAME overrides it); the first reference taken
	 * in the process names it.
	 */
	ledger_trace_init(program_invocation_short_name != NULL &&
					  program_invocation_short_name[0] != '\0'
				  ? program_invocation_short_name
				  : "ledger_client",
			  LEDGER_VERSION);
	c->traced = true;
	*out = c;
	c = NULL;
	rc = LEDGER_CLIENT_OK;
out:
	ledger_client_close(c);
	return rc;
}

void ledger_client_close(struct ledger_client *c)
{
	struct client_conn *next = NULL;

	if (c == NULL)
		return;
	for (struct client_conn *k = c->idle; k != NULL; k = next) {
		next = k->next;
		curl_easy_cleanup(k->curl);
		free(k);
	}
	free_headers(c->get_headers);
	free_headers(c->post_headers);
	free(c->user_agent);
	free(c->ca_file);
	free(c->base);
	pthread_mutex_destroy(&c->lock);
	if (c->traced)
		ledger_trace_shutdown(); /* the last reference sends what is queued */
	free(c);
}

static size_t on_data(char *data, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;

	if (len > LEDGER_CLIENT_MAX_ANSWER - s->buf.len) {
		s->too_large = true;
		return 0; /* libcurl stops with CURLE_WRITE_ERROR */
	}
	ledger_buf_append(&s->buf, data, len);
	return s->buf.oom ? 0 : len;
}

/*
 * Verification on, whatever libcurl's defaults were built as. With a CA
 * file, that file alone: the system's CA directory is not consulted
 * besides it, so a deployment's private CA is the only one ledgerd's
 * certificate can come from. The file is read again for every new
 * connection, not kept for a day in libcurl's CA cache, so a CA rotated
 * in place is taken up without restarting the program; a private CA file
 * is small, and with keep-alive new connections are few.
 */
static bool set_tls(const struct ledger_client *c, CURL *curl)
{
	if (curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK ||
	    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK)
		return false;
	if (c->ca_file == NULL)
		return true;
#if LIBCURL_VERSION_NUM >= 0x075700 /* 7.87.0 brought the cache and its timeout */
	if (curl_easy_setopt(curl, CURLOPT_CA_CACHE_TIMEOUT, 0L) != CURLE_OK)
		return false;
#endif
	return curl_easy_setopt(curl, CURLOPT_CAINFO, c->ca_file) == CURLE_OK &&
	       curl_easy_setopt(curl, CURLOPT_CAPATH, NULL) == CURLE_OK;
}

/* Takes an idle handle, or makes one. NULL when libcurl cannot. */
static struct client_conn *conn_get(struct ledger_client *c)
{
	struct client_conn *k = NULL;

	pthread_mutex_lock(&c->lock);
	k = c->idle;
	if (k != NULL)
		c->idle = k->next;
	pthread_mutex_unlock(&c->lock);
	if (k != NULL)
		return k;

	k = calloc(1, sizeof(*k));
	if (k == NULL)
		return NULL;
	k->curl = curl_easy_init();
	if (k->curl == NULL || curl_easy_setopt(k->curl, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_PATH_AS_IS, 1L) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_MAXFILESIZE_LARGE,
			     (curl_off_t)LEDGER_CLIENT_MAX_ANSWER) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_USERAGENT, c->user_agent) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_ERRORBUFFER, k->errbuf) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK ||
	    !set_tls(c, k->curl)) {
		if (k->curl != NULL)
			curl_easy_cleanup(k->curl);
		free(k);
		return NULL;
	}
	/* Redirects stay off (the default): the token must not follow one elsewhere. */
	return k;
}

static void conn_put(struct ledger_client *c, struct client_conn *k)
{
	pthread_mutex_lock(&c->lock);
	k->next = c->idle;
	c->idle = k;
	pthread_mutex_unlock(&c->lock);
}

/* Why libcurl got no answer. */
static enum ledger_client_failure classify(CURLcode code, bool too_large)
{
	switch (code) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_USE_SSL_FAILED:
		return LEDGER_CLIENT_FAILURE_TLS;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_CONNECT:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return LEDGER_CLIENT_FAILURE_UNREACHABLE;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		return LEDGER_CLIENT_FAILURE_BAD_URL;
	case CURLE_FILESIZE_EXCEEDED:
		return LEDGER_CLIENT_FAILURE_TOO_LARGE;
	case CURLE_WRITE_ERROR:
		return too_large ? LEDGER_CLIENT_FAILURE_TOO_LARGE
				 : LEDGER_CLIENT_FAILURE_TRANSPORT;
	default:
		return LEDGER_CLIENT_FAILURE_TRANSPORT;
	}
}

/*
 * Whether the same request may simply be sent again after @p failure:
 * when nothing came back, and after a TLS handshake that broke off (a
 * ledgerd restarting cuts handshakes too, and nothing of the request was
 * sent before one completed). A certificate that failed verification
 * would fail the same way again: that is for a person to fix.
 */
static bool resend_after(CURLcode code, enum ledger_client_failure failure)
{
	return failure == LEDGER_CLIENT_FAILURE_UNREACHABLE || code == CURLE_SSL_CONNECT_ERROR;
}

/* What went wrong with TLS, in words, before libcurl's own. */
static const char *tls_what(CURLcode code)
{
	switch (code) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
		return "ledgerd's certificate failed verification";
	case CURLE_SSL_CACERT_BADFILE:
		return "the CA file cannot be used";
	case CURLE_SSL_CONNECT_ERROR:
		return "the TLS handshake failed";
	default:
		return "TLS failed";
	}
}

/* Records that no answer came, with libcurl's reason. */
static void set_failure(struct ledger_client_error *err, const struct client_conn *k, CURLcode code,
			enum ledger_client_failure failure)
{
	const char *reason = k->errbuf[0] != '\0' ? k->errbuf : curl_easy_strerror(code);

	if (failure == LEDGER_CLIENT_FAILURE_TLS)
		client_error_set(err, "", "%s: %s", tls_what(code), reason);
	else
		client_error_set(err, "", "%s", reason);
	if (err != NULL)
		err->failure = failure;
}

void ledger_client_answer_clear(struct ledger_client_answer *a)
{
	if (a == NULL)
		return;
	free(a->body);
	memset(a, 0, sizeof(*a));
}

void client_answer_clear(struct client_answer *a)
{
	if (a == NULL)
		return;
	ledger_json_free(a->doc);
	free(a->body);
	memset(a, 0, sizeof(*a));
}

/* Fills @p err from an error answer; its envelope when it has one. */
static enum ledger_client_err error_from_answer(long status, char *body, size_t len,
						struct ledger_client_error *err)
{
	struct ledger_json_doc *doc = NULL;
	const struct ledger_json_value *e = NULL, *v = NULL;

	if (err == NULL) {
		free(body);
		return LEDGER_CLIENT_ERR_REFUSED;
	}
	ledger_client_error_clear(err);
	err->status = status;
	err->body = body;
	err->body_len = len;
	if (ledger_json_parse(body, len, ANSWER_MAX_DEPTH, &doc, NULL) == LEDGER_OK)
		e = ledger_json_get(ledger_json_root(doc), "error");
	if (e == NULL || e->type != LEDGER_JSON_OBJECT) {
		/* Not ledgerd's envelope: a proxy's page, say. */
		snprintf(err->message, sizeof(err->message), "HTTP %ld without an error envelope",
			 status);
		ledger_json_free(doc);
		return LEDGER_CLIENT_ERR_PROTOCOL;
	}
	v = ledger_json_get(e, "code");
	if (v != NULL && v->type == LEDGER_JSON_STRING)
		snprintf(err->code, sizeof(err->code), "%s", v->u.str.s);
	v = ledger_json_get(e, "message");
	if (v != NULL && v->type == LEDGER_JSON_STRING)
		snprintf(err->message, sizeof(err->message), "%s", v->u.str.s);
	if (!client_get_u64(e, "retry_after_ms", &err->retry_after_ms))
		err->retry_after_ms = 0;
	ledger_json_free(doc);
	return LEDGER_CLIENT_ERR_REFUSED;
}

enum ledger_client_err client_answer_read(long status, char *body, size_t len,
					  struct ledger_client_answer *ans,
					  struct ledger_client_error *err)
{
	memset(ans, 0, sizeof(*ans));
	if (status < 200 || status > 299)
		return error_from_answer(status, body, len, err);
	ans->status = status;
	ans->body = body;
	ans->len = len;
	return LEDGER_CLIENT_OK;
}

void client_trace_parse(struct ledger_trace_ctx *out, const char *traceparent,
			const char *tracestate)
{
	ledger_trace_ctx_parse(out, traceparent, traceparent != NULL ? strlen(traceparent) : 0,
			       tracestate, tracestate != NULL ? strlen(tracestate) : 0);
}

/*
 * The headers of one call in a trace: the client's own and traceparent
 * (and tracestate, when the context has one), a list of the call's own.
 * @return false when out of memory (*@p out freed and NULL)
 */
static bool trace_headers(const struct curl_slist *base, const struct ledger_trace_ctx *trace,
			  struct curl_slist **out)
{
	char line[sizeof("tracestate: ") + LEDGER_TRACESTATE_MAX];
	char tp[LEDGER_TRACEPARENT_LEN + 1];
	bool ok = true;

	*out = NULL;
	for (const struct curl_slist *n = base; n != NULL && ok; n = n->next)
		ok = add_header(out, n->data);
	ledger_trace_ctx_format(trace, tp);
	snprintf(line, sizeof(line), "traceparent: %s", tp);
	ok = ok && add_header(out, line);
	/* The parser kept only printable ASCII: no header can be smuggled in. */
	if (ok && trace->tracestate[0] != '\0') {
		snprintf(line, sizeof(line), "tracestate: %s", trace->tracestate);
		ok = add_header(out, line);
	}
	if (!ok) {
		free_headers(*out);
		*out = NULL;
	}
	return ok;
}

/* A pooled handle keeps its last call's options: this call's URL, headers, method and sink. */
static bool set_request(const struct ledger_client *c, struct client_conn *k, const char *url,
			const struct ledger_buf *body, const struct curl_slist *headers,
			struct sink *s)
{
	if (headers == NULL)
		headers = body == NULL ? c->get_headers : c->post_headers;
	if (curl_easy_setopt(k->curl, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_WRITEDATA, s) != CURLE_OK ||
	    curl_easy_setopt(k->curl, CURLOPT_HTTPHEADER, headers) != CURLE_OK)
		return false;
	if (body == NULL)
		return curl_easy_setopt(k->curl, CURLOPT_HTTPGET, 1L) == CURLE_OK;
	if (curl_easy_setopt(k->curl, CURLOPT_POSTFIELDS, body->data != NULL ? body->data : "") !=
	    CURLE_OK)
		return false;
	return curl_easy_setopt(k->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len) ==
	       CURLE_OK;
}

/*
 * Sends the request set on @p k, and sends it again, unchanged, while no
 * answer comes or the answer is 502/503/504, with back-off, until
 * @p retry_ms have passed since @p start (the call's, not this loop's).
 * @return LEDGER_CLIENT_OK with the final answer's status in *@p status
 *         and its body in @p s; else why not, with @p err saying more
 */
static enum ledger_client_err exchange(struct client_conn *k, struct sink *s, uint64_t start,
				       uint32_t retry_ms, long *status,
				       struct ledger_client_error *err)
{
	uint32_t delay = BACKOFF_FIRST_MS;
	CURLcode code;

	for (;;) {
		uint64_t elapsed, hint = 0;
		enum ledger_client_failure failure;

		ledger_buf_free(&s->buf);
		s->too_large = false;
		k->errbuf[0] = '\0';
		code = curl_easy_perform(k->curl);
		if (s->buf.oom)
			return LEDGER_CLIENT_ERR_NOMEM;
		*status = 0;
		if (code == CURLE_OK &&
		    curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, status) != CURLE_OK)
			*status = 0;
		if (code == CURLE_OK && *status != 502 && *status != 503 && *status != 504)
			return LEDGER_CLIENT_OK;
		failure = code == CURLE_OK ? LEDGER_CLIENT_FAILURE_NONE
					   : classify(code, s->too_large);
		if (failure != LEDGER_CLIENT_FAILURE_NONE && !resend_after(code, failure)) {
			set_failure(err, k, code, failure);
			return failure == LEDGER_CLIENT_FAILURE_TOO_LARGE
				       ? LEDGER_CLIENT_ERR_PROTOCOL
				       : LEDGER_CLIENT_ERR_UNAVAILABLE;
		}
		if (code == CURLE_OK) {
			/* A 503 says how long to back off; keep its body for the caller. */
			size_t len = s->buf.len;
			char *text = ledger_buf_steal(&s->buf, &len);

			if (text == NULL)
				return LEDGER_CLIENT_ERR_NOMEM;
			(void)error_from_answer(*status, text, len, err);
			if (err != NULL)
				hint = err->retry_after_ms;
		} else {
			set_failure(err, k, code, failure);
		}
		elapsed = client_now_ms() - start;
		if (elapsed >= retry_ms)
			return LEDGER_CLIENT_ERR_UNAVAILABLE;
		client_backoff(&delay, hint, retry_ms - elapsed);
	}
}

enum ledger_client_err client_send(struct ledger_client *c, const char *path,
				   const struct ledger_buf *body, uint32_t retry_ms,
				   const struct ledger_trace_ctx *trace,
				   struct ledger_client_answer *ans,
				   struct ledger_client_error *err)
{
	struct ledger_buf url = LEDGER_BUF_INIT;
	struct curl_slist *headers = NULL;
	struct sink s = {LEDGER_BUF_INIT, false};
	struct client_conn *k = NULL;
	enum ledger_client_err rc = LEDGER_CLIENT_ERR_NOMEM;
	uint64_t start = client_now_ms();
	long status = 0;
	char *answer = NULL;
	size_t answer_len = 0;

	memset(ans, 0, sizeof(*ans));
	ledger_buf_puts(&url, c->base);
	ledger_buf_puts(&url, path);
	if (url.oom || (body != NULL && body->oom))
		goto out;
	if (trace != NULL && trace->valid &&
	    !trace_headers(body == NULL ? c->get_headers : c->post_headers, trace, &headers))
		goto out;
	k = conn_get(c);
	if (k == NULL) {
		rc = LEDGER_CLIENT_ERR_INTERNAL;
		client_error_set(err, "", "libcurl could not make a handle");
		goto out;
	}
	if (!set_request(c, k, url.data, body, headers, &s)) {
		rc = LEDGER_CLIENT_ERR_INTERNAL;
		client_error_set(err, "", "libcurl refused an option");
		goto out;
	}
	rc = exchange(k, &s, start, retry_ms, &status, err);
	if (rc != LEDGER_CLIENT_OK)
		goto out;
	answer = ledger_buf_steal(&s.buf, &answer_len);
	if (answer == NULL) {
		rc = LEDGER_CLIENT_ERR_NOMEM;
		goto out;
	}
	rc = client_answer_read(status, answer, answer_len, ans, err);
out:
	if (k != NULL) {
		/* Unhook the stack buffer and the body before the handle is reused. */
		(void)curl_easy_setopt(k->curl, CURLOPT_WRITEDATA, NULL);
		(void)curl_easy_setopt(k->curl, CURLOPT_POSTFIELDS, NULL);
		(void)curl_easy_setopt(k->curl, CURLOPT_HTTPHEADER, NULL);
		conn_put(c, k);
	}
	free_headers(headers);
	if (rc != LEDGER_CLIENT_OK)
		ledger_client_answer_clear(ans);
	ledger_buf_free(&url);
	ledger_buf_free(&s.buf);
	return rc;
}

enum ledger_client_err client_call(struct ledger_client *c, const char *path,
				   const struct ledger_buf *body, uint32_t retry_ms,
				   const struct ledger_trace_ctx *trace, struct client_answer *ans,
				   struct ledger_client_error *err)
{
	struct ledger_client_answer raw;
	enum ledger_client_err rc;

	memset(ans, 0, sizeof(*ans));
	rc = client_send(c, path, body, retry_ms, trace, &raw, err);
	if (rc != LEDGER_CLIENT_OK)
		return rc;
	return client_answer_parse(&raw, ans, err);
}

enum ledger_client_err client_answer_parse(struct ledger_client_answer *raw,
					   struct client_answer *ans,
					   struct ledger_client_error *err)
{
	memset(ans, 0, sizeof(*ans));
	ans->status = raw->status;
	ans->body = raw->body;
	ans->len = raw->len;
	memset(raw, 0, sizeof(*raw)); /* the body is ans's now */
	if (ledger_json_parse(ans->body, ans->len, ANSWER_MAX_DEPTH, &ans->doc, NULL) !=
		    LEDGER_OK ||
	    ledger_json_root(ans->doc)->type != LEDGER_JSON_OBJECT) {
		client_error_set(err, "", "HTTP %ld with a body that is not a JSON object",
				 ans->status);
		client_answer_clear(ans);
		return LEDGER_CLIENT_ERR_PROTOCOL;
	}
	ans->root = ledger_json_root(ans->doc);
	return LEDGER_CLIENT_OK;
}

static bool id_char(unsigned char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '~' || ch == '-';
}

bool client_valid_id(const char *id)
{
	size_t n = 0;

	if (id == NULL)
		return false;
	for (; id[n] != '\0'; n++)
		if (n >= LEDGER_CLIENT_ID_MAX || !id_char((unsigned char)id[n]))
			return false;
	return n > 0;
}

void client_escape(struct ledger_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	/* "." and ".." are valid ids but dot segments of a path: never sent bare. */
	bool dots = strcmp(s, ".") == 0 || strcmp(s, "..") == 0;

	for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
		if (id_char(*p) && !dots) {
			ledger_buf_putc(b, (char)*p);
		} else {
			ledger_buf_putc(b, '%');
			ledger_buf_putc(b, hex[*p >> 4]);
			ledger_buf_putc(b, hex[*p & 0xf]);
		}
	}
}

void client_path(struct ledger_buf *b, const char *rid, ...)
{
	va_list ap;
	const char *seg;

	ledger_buf_puts(b, "/v1/requests/");
	client_escape(b, rid);
	va_start(ap, rid);
	while ((seg = va_arg(ap, const char *)) != NULL) {
		ledger_buf_putc(b, '/');
		client_escape(b, seg);
	}
	va_end(ap);
}

char *client_dup_string(const struct ledger_json_value *obj, const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	if (v == NULL || v->type != LEDGER_JSON_STRING)
		return NULL;
	return strndup(v->u.str.s, v->u.str.len);
}

char *client_dup_raw(const struct ledger_json_value *obj, const char *key)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	if (v == NULL)
		return NULL;
	return strndup(v->raw, v->raw_len);
}

bool client_get_u64(const struct ledger_json_value *obj, const char *key, uint64_t *out)
{
	const struct ledger_json_value *v = ledger_json_get(obj, key);

	return v != NULL && ledger_json_number_uint(v, UINT64_MAX, out) == LEDGER_OK;
}

uint64_t client_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(uint64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void client_backoff(uint32_t *delay_ms, uint64_t hint_ms, uint64_t left_ms)
{
	uint32_t r = 0;
	uint64_t d = *delay_ms;

	if (hint_ms > d)
		d = hint_ms;
	if (d > BACKOFF_CAP_MS)
		d = BACKOFF_CAP_MS;
	/* Full jitter over the upper half keeps clients that failed together apart. */
	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = (uint32_t)client_now_ms();
	d = d / 2 + (d > 1 ? r % (d / 2 + 1) : 0);
	if (d > left_ms)
		d = left_ms;
	sleep_ms(d);
	*delay_ms = *delay_ms >= BACKOFF_CAP_MS / 2 ? BACKOFF_CAP_MS : *delay_ms * 2;
}

bool client_random_hex(char *hex, size_t bytes)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char raw[64];
	size_t got = 0;

	if (bytes > sizeof(raw))
		return false;
	while (got < bytes) {
		ssize_t n = getrandom(raw + got, bytes - got, 0);

		if (n < 0 && errno != EINTR)
			return false;
		if (n > 0)
			got += (size_t)n;
	}
	for (size_t i = 0; i < bytes; i++) {
		hex[2 * i] = digits[raw[i] >> 4];
		hex[2 * i + 1] = digits[raw[i] & 0xf];
	}
	hex[2 * bytes] = '\0';
	explicit_bzero(raw, sizeof(raw));
	return true;
}
