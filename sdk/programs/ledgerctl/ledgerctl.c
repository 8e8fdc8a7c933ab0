/*
 * sdk/programs/ledgerctl/ledgerctl.c: ledgerctl, the operator's client of ledgerd:
 * its command line, the commands show, unknown and resolve over the C
 * client's calls, and exit statuses a script can branch on. It exists so
 * that the person settling an incident reads and settles tool calls
 * without curl. ledgerd or its database may be what is down, so every call
 * is sent once, bounded (3 s to connect, 10 s in all, 16 MiB of answer),
 * and a failure says which bound it was: the person is the retry.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/buf.h"
#include "ledger/common/json.h"
#include "ledger/common/jsonw.h"
#include "sdk/c/ledger_client.h"
#include "sdk/programs/ledgerctl/field.h"
#include "sdk/programs/ledgerctl/text.h"
#include "sdk/programs/ledgerctl/timeline.h"

#ifndef LEDGER_VERSION
#define LEDGER_VERSION "unknown"
#endif

#define DEFAULT_URL "http://127.0.0.1:8080"
#define TIMEOUT_MS 10000  /* one call, in all */
#define ANSWER_DEPTH 128  /* a stored result may nest 64 levels inside an answer */
#define RESULT_DEPTH 64   /* what ledgerd accepts in a body */
#define MAX_PAGES 100000  /* a cursor that never ends is a bug, not a history */
#define MESSAGE_WIDTH 300 /* the longest server message repeated on stderr */

enum ledgerctl_exit {
	LEDGERCTL_EXIT_OK = 0,
	LEDGERCTL_EXIT_FAILED = 1,      /* any other failure: 400, 409, 500, a bad answer */
	LEDGERCTL_EXIT_USAGE = 2,       /* the command line is wrong */
	LEDGERCTL_EXIT_NOT_FOUND = 3,   /* 404, 410 */
	LEDGERCTL_EXIT_NOT_ALLOWED = 4, /* 401, 403 */
	LEDGERCTL_EXIT_UNREACHABLE = 5, /* no answer in time, or 503 */
};

static const char usage_text[] =
	"usage: ledgerctl [--url URL] [--token TOKEN] [--ca-file FILE] [--json] COMMAND ...\n"
	"\n"
	"The operator's client of ledgerd.\n"
	"\n"
	"commands:\n"
	"  show REQUEST_ID      the request, its attempts, its tool calls and every event of its\n"
	"                       history, in order\n"
	"  unknown              every tool call whose outcome is unknown (all pages)\n"
	"  resolve REQUEST_ID TOOL_CALL_ID --as succeeded|failed|not_executed\n"
	"          [--result JSON] [--note TEXT]\n"
	"                       settles a call after checking the tool's own records; --result\n"
	"                       (succeeded or failed only) is sent exactly as written\n"
	"  help                 this text\n"
	"\n"
	"options (anywhere on the line; -- ends them):\n"
	"  --url URL            ledgerd's address (else $LEDGER_URL, else " DEFAULT_URL ")\n"
	"  --token TOKEN        bearer token (else $LEDGER_TOKEN); resolve needs an admin token\n"
	"  --ca-file FILE       the PEM file of the CAs that may sign ledgerd's certificate, for\n"
	"                       an https URL (else $LEDGER_CA_FILE, else the system's trust\n"
	"                       store); the certificate and its host name are always verified\n"
	"  --json               print the API's answer body instead of text, and nothing else;\n"
	"                       one page is printed as received; for show and unknown, an\n"
	"                       answer of several pages is printed merged: the first page's\n"
	"                       object with the events (items) of every page, no next cursor\n"
	"  -h, --help           this text\n"
	"  --version            the version\n"
	"\n"
	"exit status:\n"
	"  0  success\n"
	"  1  any other failure (409 already_completed, 400, 500, an answer that is not JSON,\n"
	"     TLS: ledgerd's certificate failed verification)\n"
	"  2  usage error: unknown command or flag, missing argument, --result not JSON,\n"
	"     a CA file that cannot be read\n"
	"  3  not found: 404, 410 result_expired\n"
	"  4  not allowed: 401 unauthorized, 403 forbidden\n"
	"  5  unreachable: connection refused, unknown host, timeout, 503 store_unavailable\n"
	"\n"
	"An error is one line on standard error, with ledgerd's error code and message, and\n"
	"nothing on standard output (with --json too).\n";

struct options {
	const char *command;
	const char *args[2]; /* positional arguments after the command */
	size_t nargs;
	const char *url;     /* --url, or NULL */
	const char *token;   /* --token, or NULL */
	const char *ca_file; /* --ca-file, or NULL */
	const char *as;      /* --as */
	const char *result;
	const char *note;
	bool json;
	bool help;
	bool version;
};

/* --- messages --- */

static int usage_error(const char *what, const char *arg)
{
	struct ledger_buf line = LEDGER_BUF_INIT;

	ledgerctl_text_put(&line, what, strlen(what), 2 * MESSAGE_WIDTH, LEDGERCTL_TEXT_AS_IS);
	if (arg != NULL)
		ledgerctl_text_put(&line, arg, strlen(arg), 60, LEDGERCTL_TEXT_AS_IS);
	fprintf(stderr, "ledgerctl: %s (see ledgerctl --help)\n",
		line.data != NULL ? line.data : what);
	ledger_buf_free(&line);
	return LEDGERCTL_EXIT_USAGE;
}

/* Prints "ledgerctl: @what: @text" on stderr, both made printable on one line. */
static void complain(const char *what, const char *text)
{
	struct ledger_buf line = LEDGER_BUF_INIT;

	ledger_buf_puts(&line, "ledgerctl: ");
	if (what != NULL) {
		ledgerctl_text_put(&line, what, strlen(what), 120, LEDGERCTL_TEXT_AS_IS);
		ledger_buf_puts(&line, ": ");
	}
	ledgerctl_text_put(&line, text, strlen(text), 2 * MESSAGE_WIDTH, LEDGERCTL_TEXT_AS_IS);
	fprintf(stderr, "%s\n",
		line.oom || line.data == NULL ? "ledgerctl: out of memory" : line.data);
	ledger_buf_free(&line);
}

static int out_of_memory(void)
{
	complain(NULL, "out of memory");
	return LEDGERCTL_EXIT_FAILED;
}

static int status_exit(long status)
{
	if (status == 404 || status == 410)
		return LEDGERCTL_EXIT_NOT_FOUND;
	if (status == 401 || status == 403)
		return LEDGERCTL_EXIT_NOT_ALLOWED;
	if (status == 503)
		return LEDGERCTL_EXIT_UNREACHABLE;
	return LEDGERCTL_EXIT_FAILED;
}

/*
 * Reports an answer that is not a success, with ledgerd's error code and
 * message when its body is the error envelope.
 * @return the exit status it calls for
 */
static int report_answer(const char *what, long status, const char *body, size_t len,
			 bool have_token)
{
	struct ledger_json_doc *doc = NULL;
	struct ledger_buf text = LEDGER_BUF_INIT;
	const struct ledger_json_value *err = NULL;
	const char *code = NULL, *message = NULL;
	int rc = status_exit(status);

	if (body != NULL && ledger_json_parse(body, len, ANSWER_DEPTH, &doc, NULL) == LEDGER_OK) {
		err = ledgerctl_field_obj(ledger_json_root(doc), "error");
		code = ledgerctl_field_str(err, "code");
		message = ledgerctl_field_str(err, "message");
	}
	if (code != NULL) {
		ledger_buf_puts(&text, code);
		if (message != NULL) {
			ledger_buf_puts(&text, ": ");
			ledgerctl_text_put(&text, message, strlen(message), MESSAGE_WIDTH,
					   LEDGERCTL_TEXT_AS_IS);
		}
		ledger_buf_printf(&text, " (HTTP %ld)", status);
	} else {
		ledger_buf_printf(&text, "HTTP %ld without an error body", status);
	}
	if (status == 401 && !have_token)
		ledger_buf_puts(&text, "; no token given: set LEDGER_TOKEN or pass --token");
	complain(what, text.data != NULL ? text.data : "out of memory");
	ledger_buf_free(&text);
	ledger_json_free(doc);
	return rc;
}

/*
 * Reports a call that did not succeed (@p rc not LEDGER_CLIENT_OK): an
 * answer as report_answer() does, else why none came.
 * @return the exit status it calls for
 */
static int report_failure(const char *what, enum ledger_client_err rc,
			  const struct ledger_client_error *e, bool have_token)
{
	struct ledger_buf text = LEDGER_BUF_INIT;
	int exit_status = LEDGERCTL_EXIT_FAILED;

	if (rc == LEDGER_CLIENT_ERR_NOMEM)
		return out_of_memory();
	if (e->status != 0)
		return report_answer(what, e->status, e->body, e->body_len, have_token);
	switch (e->failure) {
	case LEDGER_CLIENT_FAILURE_UNREACHABLE:
		ledger_buf_printf(&text, "cannot reach ledgerd: %s", e->message);
		exit_status = LEDGERCTL_EXIT_UNREACHABLE;
		break;
	case LEDGER_CLIENT_FAILURE_BAD_URL:
		ledger_buf_printf(&text, "bad --url: %s", e->message);
		exit_status = LEDGERCTL_EXIT_USAGE;
		break;
	case LEDGER_CLIENT_FAILURE_TOO_LARGE:
		ledger_buf_printf(&text, "the answer is larger than %u MiB",
				  LEDGER_CLIENT_MAX_ANSWER >> 20);
		break;
	case LEDGER_CLIENT_FAILURE_TLS:
		/* Not "unreachable": asking again changes nothing until a person
		 * fixes the CA file or the certificate. */
		ledger_buf_printf(&text, "TLS: %s", e->message);
		break;
	case LEDGER_CLIENT_FAILURE_TRANSPORT:
	case LEDGER_CLIENT_FAILURE_NONE:
		ledger_buf_printf(&text, "%s",
				  e->message[0] != '\0' ? e->message : ledger_client_strerror(rc));
		break;
	}
	complain(what, text.data != NULL ? text.data : "out of memory");
	ledger_buf_free(&text);
	return exit_status;
}

/* Parses a success's body; on failure reports it and returns LEDGERCTL_EXIT_FAILED. */
static int parse_answer(const char *what, const struct ledger_client_answer *a,
			struct ledger_json_doc **doc)
{
	struct ledger_json_error err;
	char text[160];

	memset(&err, 0, sizeof(err));
	if (ledger_json_parse(a->body, a->len, ANSWER_DEPTH, doc, &err) == LEDGER_OK &&
	    ledger_json_root(*doc)->type == LEDGER_JSON_OBJECT)
		return LEDGERCTL_EXIT_OK;
	ledger_json_free(*doc);
	*doc = NULL;
	if (err.kind == LEDGER_JSON_ERR_NOMEM)
		return out_of_memory();
	snprintf(text, sizeof(text), "the answer is not a JSON object (byte %zu: %s)", err.offset,
		 err.message[0] != '\0' ? err.message : "not an object");
	complain(what, text);
	return LEDGERCTL_EXIT_FAILED;
}

/* Writes @p len bytes to stdout, with a final newline if they lack one. */
static int print_out(const char *s, size_t len)
{
	bool ok = len == 0 || fwrite(s, 1, len, stdout) == len;

	if (ok && (len == 0 || s[len - 1] != '\n'))
		ok = putchar('\n') != EOF;
	if (fflush(stdout) != 0 || !ok) {
		complain(NULL, "cannot write to standard output");
		return LEDGERCTL_EXIT_FAILED;
	}
	return LEDGERCTL_EXIT_OK;
}

/* --- pages --- */

/* Every page of a paged answer, kept parsed: the printers borrow from all of them. */
struct pages {
	struct ledger_client_answer *answers;
	struct ledger_json_doc **docs;
	size_t n, cap;
	const struct ledger_json_value **items; /* events or list items, in order */
	size_t nitems, items_cap;
};

static void pages_free(struct pages *p)
{
	for (size_t i = 0; i < p->n; i++) {
		ledger_client_answer_clear(&p->answers[i]);
		ledger_json_free(p->docs[i]);
	}
	free(p->answers);
	free(p->docs);
	free(p->items);
	memset(p, 0, sizeof(*p));
}

static bool pages_grow(struct pages *p)
{
	struct ledger_client_answer *answers = NULL;
	struct ledger_json_doc **docs = NULL;
	size_t cap = p->cap ? p->cap * 2 : 4;

	if (p->n < p->cap)
		return true;
	answers = reallocarray(p->answers, cap, sizeof(*answers));
	if (answers == NULL)
		return false;
	p->answers = answers;
	docs = reallocarray(p->docs, cap, sizeof(*docs));
	if (docs == NULL)
		return false;
	p->docs = docs;
	p->cap = cap;
	return true;
}

/* Appends the elements of the array @p list (NULL: none) to the items. */
static bool pages_take(struct pages *p, const struct ledger_json_value *list)
{
	if (list == NULL)
		return true;
	if (list->u.arr.count > p->items_cap - p->nitems) {
		size_t cap = p->items_cap ? p->items_cap : 64;
		const struct ledger_json_value **items = NULL;

		while (cap - p->nitems < list->u.arr.count)
			cap *= 2;
		items = reallocarray(p->items, cap, sizeof(*items));
		if (items == NULL)
			return false;
		p->items = items;
		p->items_cap = cap;
	}
	for (size_t i = 0; i < list->u.arr.count; i++)
		p->items[p->nitems++] = &list->u.arr.items[i];
	return true;
}

/* Asks for one page of @p id's answer: the first when @p cursor is NULL. */
typedef enum ledger_client_err (*page_fn)(struct ledger_client *c, const char *id,
					  const char *cursor, struct ledger_client_answer *out,
					  struct ledger_client_error *err);

static enum ledger_client_err request_page(struct ledger_client *c, const char *rid,
					   const char *cursor, struct ledger_client_answer *out,
					   struct ledger_client_error *err)
{
	return ledger_client_request_get(c, rid, cursor, out, err);
}

static enum ledger_client_err unknown_page(struct ledger_client *c, const char *unused,
					   const char *cursor, struct ledger_client_answer *out,
					   struct ledger_client_error *err)
{
	(void)unused;
	return ledger_client_tool_calls_list(c, "unknown", 1000, cursor, out, err);
}

/*
 * Reads page after page of @p id's answer through @p page, following the
 * cursor named @p cursor_key, and collects the arrays named @p items_key.
 * @return an exit status (reported already when not LEDGERCTL_EXIT_OK)
 */
static int fetch_pages(struct ledger_client *c, const char *what, bool have_token, page_fn page,
		       const char *id, const char *cursor_key, const char *items_key,
		       struct pages *p)
{
	const char *cursor = NULL;
	struct ledger_client_error err;
	enum ledger_client_err got;
	int rc = LEDGERCTL_EXIT_FAILED;

	memset(&err, 0, sizeof(err));
	for (;;) {
		const struct ledger_json_value *root = NULL;
		const struct ledger_client_answer *a = NULL;
		const char *next = NULL;

		if (p->n == MAX_PAGES) {
			complain(what, "the answer's pages never end");
			goto out;
		}
		if (!pages_grow(p)) {
			rc = out_of_memory();
			goto out;
		}
		p->docs[p->n] = NULL;
		got = page(c, id, cursor, &p->answers[p->n], &err);
		a = &p->answers[p->n++];
		if (got != LEDGER_CLIENT_OK) {
			rc = report_failure(what, got, &err, have_token);
			goto out;
		}
		if (a->status != 200) {
			rc = report_answer(what, a->status, a->body, a->len, have_token);
			goto out;
		}
		rc = parse_answer(what, a, &p->docs[p->n - 1]);
		if (rc != LEDGERCTL_EXIT_OK)
			goto out;
		rc = LEDGERCTL_EXIT_FAILED;
		root = ledger_json_root(p->docs[p->n - 1]);
		if (!pages_take(p, ledgerctl_field_arr(root, items_key))) {
			rc = out_of_memory();
			goto out;
		}
		next = ledgerctl_field_str(root, cursor_key);
		if (next == NULL)
			break;
		if (cursor != NULL && strcmp(cursor, next) == 0) {
			complain(what, "the answer's cursor does not advance");
			goto out;
		}
		cursor = next;
	}
	rc = LEDGERCTL_EXIT_OK;
out:
	ledger_client_error_clear(&err);
	return rc;
}

/*
 * For --json: one page as received; several merged into the first page's
 * object, @p items_key holding every page's items and @p cursor_key null
 * (or dropped when @p drop_cursor).
 */
static int print_pages_json(const struct pages *p, const char *items_key, const char *cursor_key,
			    bool drop_cursor)
{
	const struct ledger_json_value *root = NULL;
	struct ledger_buf buf = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	int rc;

	if (p->n == 1)
		return print_out(p->answers[0].body, p->answers[0].len);
	root = ledger_json_root(p->docs[0]);
	ledger_jsonw_init(&w, &buf);
	ledger_jsonw_object_begin(&w);
	for (size_t i = 0; i < root->u.obj.count; i++) {
		const struct ledger_json_member *m = &root->u.obj.members[i];

		if (strcmp(m->key, cursor_key) == 0) {
			if (!drop_cursor) {
				ledger_jsonw_key(&w, m->key);
				ledger_jsonw_null(&w);
			}
		} else if (strcmp(m->key, items_key) == 0) {
			ledger_jsonw_key(&w, m->key);
			ledger_jsonw_array_begin(&w);
			for (size_t j = 0; j < p->nitems; j++)
				ledger_jsonw_raw(&w, p->items[j]->raw, p->items[j]->raw_len);
			ledger_jsonw_array_end(&w);
		} else {
			ledger_jsonw_key(&w, m->key);
			ledger_jsonw_raw(&w, m->value.raw, m->value.raw_len);
		}
	}
	ledger_jsonw_object_end(&w);
	rc = buf.oom ? out_of_memory() : print_out(buf.data, buf.len);
	ledger_buf_free(&buf);
	return rc;
}

/* --- commands --- */

static int cmd_show(struct ledger_client *c, const struct options *o, bool have_token)
{
	struct pages p;
	struct ledger_buf text = LEDGER_BUF_INIT, what = LEDGER_BUF_INIT;
	struct ledgerctl_review r;
	const struct ledger_json_value *root = NULL;
	int rc = LEDGERCTL_EXIT_FAILED;

	memset(&p, 0, sizeof(p));
	ledger_buf_printf(&what, "show %s", o->args[0]);
	if (what.oom) {
		rc = out_of_memory();
		goto out;
	}
	rc = fetch_pages(c, what.data, have_token, request_page, o->args[0], "next_events_cursor",
			 "events", &p);
	if (rc != LEDGERCTL_EXIT_OK)
		goto out;
	if (o->json) {
		rc = print_pages_json(&p, "events", "next_events_cursor", true);
		goto out;
	}
	root = ledger_json_root(p.docs[0]);
	memset(&r, 0, sizeof(r));
	r.request = ledgerctl_field_obj(root, "request");
	r.attempts = ledgerctl_field_arr(root, "attempts");
	r.tool_calls = ledgerctl_field_arr(root, "tool_calls");
	r.events = p.items;
	r.nevents = p.nitems;
	if (r.request == NULL) {
		complain(what.data, "the answer has no request object");
		rc = LEDGERCTL_EXIT_FAILED;
		goto out;
	}
	if (ledgerctl_timeline_render(&r, &text) != LEDGER_OK) {
		rc = out_of_memory();
		goto out;
	}
	rc = print_out(text.data, text.len);
out:
	ledger_buf_free(&text);
	ledger_buf_free(&what);
	pages_free(&p);
	return rc;
}

static int cmd_unknown(struct ledger_client *c, const struct options *o, bool have_token)
{
	struct pages p;
	struct ledger_buf text = LEDGER_BUF_INIT;
	int rc;

	memset(&p, 0, sizeof(p));
	rc = fetch_pages(c, "unknown", have_token, unknown_page, NULL, "next_cursor", "items", &p);
	if (rc != LEDGERCTL_EXIT_OK)
		goto out;
	if (o->json) {
		rc = print_pages_json(&p, "items", "next_cursor", false);
		goto out;
	}
	if (ledgerctl_timeline_render_unknown(p.items, p.nitems, &text) != LEDGER_OK)
		rc = out_of_memory();
	else
		rc = print_out(text.data, text.len);
out:
	ledger_buf_free(&text);
	pages_free(&p);
	return rc;
}

/*
 * Checks what a resolve sends, before anything is sent, in ledgerctl's
 * words: --result must be JSON (ledgerd's own reader says so; it goes out
 * byte for byte) and --note UTF-8. Fills @p r, borrowing from @p o.
 */
static int check_resolution(const struct options *o, struct ledger_resolution *r)
{
	struct ledger_json_doc *result = NULL, *note = NULL;
	struct ledger_json_error err;
	struct ledger_buf quoted = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	int rc = LEDGERCTL_EXIT_USAGE;

	memset(&err, 0, sizeof(err));
	if (o->result != NULL && ledger_json_parse(o->result, strlen(o->result), RESULT_DEPTH,
						   &result, &err) != LEDGER_OK) {
		char text[160];

		if (err.kind == LEDGER_JSON_ERR_NOMEM) {
			rc = out_of_memory();
			goto out;
		}
		snprintf(text, sizeof(text), "--result is not JSON (byte %zu: %s)", err.offset,
			 err.message);
		rc = usage_error(text, NULL);
		goto out;
	}
	if (o->note != NULL) {
		/* The writer takes the note as UTF-8; reading it back says whether it was. */
		ledger_jsonw_init(&w, &quoted);
		ledger_jsonw_string(&w, o->note);
		if (quoted.oom) {
			rc = out_of_memory();
			goto out;
		}
		if (ledger_json_parse(quoted.data, quoted.len, 1, &note, &err) != LEDGER_OK) {
			rc = err.kind == LEDGER_JSON_ERR_NOMEM
				     ? out_of_memory()
				     : usage_error("--note is not UTF-8", NULL);
			goto out;
		}
	}
	memset(r, 0, sizeof(*r));
	r->request_id = o->args[0];
	r->tool_call_id = o->args[1];
	r->as = LEDGER_RESOLVED_NOT_EXECUTED; /* check_command() allowed only the three */
	if (strcmp(o->as, "succeeded") == 0)
		r->as = LEDGER_RESOLVED_SUCCEEDED;
	else if (strcmp(o->as, "failed") == 0)
		r->as = LEDGER_RESOLVED_FAILED;
	r->result_json = o->result;
	r->note = o->note;
	rc = LEDGERCTL_EXIT_OK;
out:
	ledger_json_free(result);
	ledger_json_free(note);
	ledger_buf_free(&quoted);
	return rc;
}

static int cmd_resolve(struct ledger_client *c, const struct options *o,
		       const struct ledger_resolution *res, bool have_token)
{
	struct ledger_client_answer a;
	struct ledger_client_error err;
	struct ledger_json_doc *doc = NULL;
	struct ledger_buf what = LEDGER_BUF_INIT, text = LEDGER_BUF_INIT;
	struct ledger_buf said = LEDGER_BUF_INIT;
	const struct ledger_json_value *root = NULL;
	const char *status = NULL;
	char token[24] = "?";
	uint64_t fencing = 0;
	enum ledger_client_err got;
	int rc = LEDGERCTL_EXIT_FAILED;

	memset(&a, 0, sizeof(a));
	memset(&err, 0, sizeof(err));
	ledger_buf_printf(&what, "%s/%s", o->args[0], o->args[1]);
	if (what.oom) {
		rc = out_of_memory();
		goto out;
	}
	got = ledger_client_tool_call_resolve(c, res, &a, &err);
	if (got != LEDGER_CLIENT_OK) {
		rc = report_failure(what.data, got, &err, have_token);
		goto out;
	}
	if (o->json) {
		rc = print_out(a.body, a.len);
		goto out;
	}
	rc = parse_answer(what.data, &a, &doc);
	if (rc != LEDGERCTL_EXIT_OK)
		goto out;
	root = ledger_json_root(doc);
	status = ledgerctl_field_str(root, "status");
	/* what happened is said in full; the ids give way when the line is too long */
	if (status != NULL && strcmp(status, "released") == 0) {
		if (ledgerctl_field_uint(root, "fencing_token", &fencing))
			snprintf(token, sizeof(token), "%llu", (unsigned long long)fencing);
		ledger_buf_printf(&said,
				  " resolved: not executed, claimable again (fencing token %s)",
				  token);
	} else {
		const char *outcome = ledgerctl_field_str(root, "outcome");

		ledger_buf_puts(&said, " resolved: ");
		ledgerctl_text_puts(&said, outcome != NULL ? outcome : status, 20,
				    LEDGERCTL_TEXT_AS_IS);
	}
	if (said.oom) {
		rc = out_of_memory();
		goto out;
	}
	ledgerctl_text_put(&text, what.data, what.len,
			   LEDGERCTL_TEXT_WIDTH - ledgerctl_text_width(said.data, said.len),
			   LEDGERCTL_TEXT_AS_IS);
	ledger_buf_append(&text, said.data, said.len);
	ledger_buf_putc(&text, '\n');
	rc = text.oom ? out_of_memory() : print_out(text.data, text.len);
out:
	ledger_buf_free(&what);
	ledger_buf_free(&text);
	ledger_buf_free(&said);
	ledger_json_free(doc);
	ledger_client_answer_clear(&a);
	ledger_client_error_clear(&err);
	return rc;
}

/* --- the command line --- */

/* The value of option @p name at argv[*i] ("--name=v" or "--name v"); NULL if it is not @p name. */
static const char *option_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
	size_t n = strlen(name);
	const char *arg = argv[*i];

	if (strncmp(arg, name, n) != 0)
		return NULL;
	if (arg[n] == '=')
		return arg + n + 1;
	if (arg[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const char *const valued[] = {"--url",    "--token", "--as",
					     "--result", "--note",  "--ca-file"};
	bool options_done = false;

	memset(o, 0, sizeof(*o));
	/* help (then the version) wins over every mistake around it */
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			o->help = true;
		else if (strcmp(argv[i], "--version") == 0)
			o->version = true;
	}
	if (o->help || o->version)
		return LEDGERCTL_EXIT_OK;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *value = NULL;
		bool missing = false;
		size_t k;

		if (options_done || arg[0] != '-' || arg[1] == '\0') {
			if (o->command == NULL)
				o->command = arg;
			else if (o->nargs < 2)
				o->args[o->nargs++] = arg;
			else
				return usage_error("too many arguments: ", arg);
			continue;
		}
		if (strcmp(arg, "--") == 0) {
			options_done = true;
			continue;
		}
		if (strcmp(arg, "--json") == 0) {
			o->json = true;
			continue;
		}
		for (k = 0; k < sizeof(valued) / sizeof(valued[0]); k++) {
			value = option_value(argc, argv, &i, valued[k], &missing);
			if (value != NULL || missing)
				break;
		}
		if (missing)
			return usage_error("a value must follow ", valued[k]);
		if (value == NULL)
			return usage_error("unknown flag ", arg);
		if (k == 0)
			o->url = value;
		else if (k == 1)
			o->token = value;
		else if (k == 2)
			o->as = value;
		else if (k == 3)
			o->result = value;
		else if (k == 4)
			o->note = value;
		else
			o->ca_file = value;
	}
	return LEDGERCTL_EXIT_OK;
}

/* Checks the command and its arguments; @return an exit status. */
static int check_command(const struct options *o)
{
	size_t want;

	if (o->command == NULL)
		return usage_error("no command given", NULL);
	if (strcmp(o->command, "show") == 0)
		want = 1;
	else if (strcmp(o->command, "unknown") == 0)
		want = 0;
	else if (strcmp(o->command, "resolve") == 0)
		want = 2;
	else
		return usage_error("unknown command ", o->command);
	if (o->nargs < want)
		return usage_error(want == 1 ? "show needs a REQUEST_ID"
					     : "resolve needs a REQUEST_ID and a TOOL_CALL_ID",
				   NULL);
	if (o->nargs > want)
		return usage_error("too many arguments: ", o->args[want]);
	for (size_t i = 0; i < o->nargs; i++) {
		if (o->args[i][0] == '\0')
			return usage_error("an id is empty", NULL);
	}
	if (want != 2) {
		if (o->as != NULL || o->result != NULL || o->note != NULL)
			return usage_error("--as, --result and --note go with resolve", NULL);
		return LEDGERCTL_EXIT_OK;
	}
	if (o->as == NULL)
		return usage_error("resolve needs --as succeeded|failed|not_executed", NULL);
	if (strcmp(o->as, "succeeded") != 0 && strcmp(o->as, "failed") != 0 &&
	    strcmp(o->as, "not_executed") != 0)
		return usage_error("--as must be succeeded, failed or not_executed, not ", o->as);
	if (o->result != NULL && strcmp(o->as, "not_executed") == 0)
		return usage_error("--result goes with --as succeeded or failed", NULL);
	return LEDGERCTL_EXIT_OK;
}

/* A token goes into a header line: printable ASCII only. Never echoed. */
static bool token_ok(const char *token)
{
	for (const unsigned char *p = (const unsigned char *)token; *p != '\0'; p++) {
		if (*p <= 0x20 || *p >= 0x7f)
			return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	struct options o;
	struct ledger_client_options opts;
	struct ledger_client *c = NULL;
	struct ledger_resolution res;
	enum ledger_client_err err;
	int rc;

	memset(&opts, 0, sizeof(opts));
	memset(&res, 0, sizeof(res));
	rc = parse_args(argc, argv, &o);
	if (rc != LEDGERCTL_EXIT_OK)
		goto out;
	if (o.help || (o.command != NULL && strcmp(o.command, "help") == 0)) {
		fputs(usage_text, stdout);
		rc = fflush(stdout) == 0 ? LEDGERCTL_EXIT_OK : LEDGERCTL_EXIT_FAILED;
		goto out;
	}
	if (o.version) {
		printf("ledgerctl %s\n", LEDGER_VERSION);
		rc = fflush(stdout) == 0 ? LEDGERCTL_EXIT_OK : LEDGERCTL_EXIT_FAILED;
		goto out;
	}
	rc = check_command(&o);
	if (rc != LEDGERCTL_EXIT_OK)
		goto out;
	opts.url = o.url != NULL ? o.url : getenv("LEDGER_URL");
	if (opts.url == NULL || opts.url[0] == '\0')
		opts.url = DEFAULT_URL;
	opts.token = o.token != NULL ? o.token : getenv("LEDGER_TOKEN");
	if (opts.token != NULL && opts.token[0] == '\0')
		opts.token = NULL;
	if (opts.token != NULL && !token_ok(opts.token)) {
		rc = usage_error("the token holds spaces or control characters", NULL);
		goto out;
	}
	if (strcmp(o.command, "resolve") == 0) {
		rc = check_resolution(&o, &res);
		if (rc != LEDGERCTL_EXIT_OK)
			goto out;
	}
	/* The flag wins; an empty variable is no variable, an empty flag a mistake. */
	opts.ca_file = o.ca_file != NULL ? o.ca_file : getenv("LEDGER_CA_FILE");
	if (opts.ca_file != NULL && opts.ca_file[0] == '\0' && o.ca_file == NULL)
		opts.ca_file = NULL;
	if (opts.ca_file != NULL) {
		struct ledger_client_error ca_err;

		memset(&ca_err, 0, sizeof(ca_err));
		if (ledger_client_ca_file_check(opts.ca_file, &ca_err) != LEDGER_CLIENT_OK) {
			complain(o.ca_file != NULL ? "--ca-file" : "LEDGER_CA_FILE",
				 ca_err.message);
			ledger_client_error_clear(&ca_err);
			rc = LEDGERCTL_EXIT_USAGE;
			goto out;
		}
	}
	/* Without a token none is sent: ledgerd's 401 is then the answer, with a hint. */
	opts.timeout_ms = TIMEOUT_MS;
	opts.no_retry = true;
	opts.user_agent = "ledgerctl/" LEDGER_VERSION;
	err = ledger_client_open(&opts, &c);
	if (err == LEDGER_CLIENT_ERR_INVALID) {
		rc = usage_error("--url must start with http:// or https://", NULL);
		goto out;
	}
	if (err != LEDGER_CLIENT_OK) {
		complain(NULL, "cannot start libcurl");
		rc = LEDGERCTL_EXIT_FAILED;
		goto out;
	}
	if (strcmp(o.command, "show") == 0)
		rc = cmd_show(c, &o, opts.token != NULL);
	else if (strcmp(o.command, "unknown") == 0)
		rc = cmd_unknown(c, &o, opts.token != NULL);
	else
		rc = cmd_resolve(c, &o, &res, opts.token != NULL);
out:
	ledger_client_close(c);
	return rc;
}
