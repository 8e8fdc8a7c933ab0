/*
 * sdk/programs/ledger-mcp/sse.c: the text/event-stream reader. Lines end in CRLF, LF or a
 * lone CR, one of which may be split across two reads; a blank line ends an
 * event; "data" values are joined by LF, comments and unknown fields are
 * skipped, as the WHATWG parsing rules say, and nothing else is accepted.
 * It also writes the one event the proxy makes itself.
 */
#include "sdk/programs/ledger-mcp/sse.h"

#include <stdlib.h>
#include <string.h>

static const char BOM[] = "\xEF\xBB\xBF";

void mcp_sse_init(struct mcp_sse *s)
{
	memset(s, 0, sizeof(*s));
}

void mcp_sse_feed(struct mcp_sse *s, const char *bytes, size_t n)
{
	if (s->broken || n == 0)
		return;
	ledger_buf_append(&s->buf, bytes, n);
	if (s->buf.oom)
		s->broken = true;
}

static void view(const struct mcp_sse *s, struct mcp_sse_event *ev)
{
	ev->raw = s->buf.data;
	ev->raw_len = s->end;
	ev->data = s->data.len > 0 ? s->data.data : "";
	ev->data_len = s->data.len;
	ev->has_data = s->has_data;
	ev->head = s->head.len > 0 ? s->head.data : "";
	ev->head_len = s->head.len;
}

/* Takes the field of one line (no terminator) into the event being read. */
static void field(struct mcp_sse *s, const char *line, size_t n)
{
	const char *colon = memchr(line, ':', n);
	size_t name_len = colon != NULL ? (size_t)(colon - line) : n;
	const char *value = colon != NULL ? colon + 1 : line + n;
	size_t value_len = (size_t)(line + n - value);

	if (value_len > 0 && value[0] == ' ') {
		value++;
		value_len--;
	}
	if (name_len == 4 && memcmp(line, "data", 4) == 0) {
		ledger_buf_append(&s->data, value, value_len);
		ledger_buf_putc(&s->data, '\n');
		s->has_data = true;
	} else if ((name_len == 5 && memcmp(line, "event", 5) == 0) ||
		   (name_len == 2 && memcmp(line, "id", 2) == 0)) {
		ledger_buf_append(&s->head, line, n);
		ledger_buf_putc(&s->head, '\n');
	}
	/* "retry", comments (an empty name) and unknown fields change nothing here. */
}

/*
 * The length of the line at @p p (@p n bytes held) and of its terminator.
 * @return false when the bytes end before the line does
 */
static bool line_at(const char *p, size_t n, size_t *len, size_t *term, bool *cr_last)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != '\n' && p[i] != '\r')
			continue;
		*len = i;
		*term = p[i] == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
		*cr_last = p[i] == '\r' && i + 1 == n;
		return true;
	}
	return false;
}

enum mcp_sse_read mcp_sse_next(struct mcp_sse *s, struct mcp_sse_event *ev)
{
	for (;;) {
		const char *p = s->buf.data != NULL ? s->buf.data + s->pos : "";
		size_t n = s->buf.len - s->pos, len = 0, term = 0;
		bool cr_last = false;

		if (s->broken || s->data.oom || s->head.oom) {
			s->broken = true;
			return MCP_SSE_BROKEN;
		}
		if (s->end > 0) {
			view(s, ev);
			return MCP_SSE_EVENT;
		}
		if (n == 0)
			return MCP_SSE_MORE;
		if (s->skip_lf) {
			s->skip_lf = false;
			if (p[0] == '\n') {
				s->pos++;
				continue;
			}
		}
		if (!s->started) {
			size_t k = n < 3 ? n : 3;

			if (memcmp(p, BOM, k) == 0 && k < 3)
				return MCP_SSE_MORE; /* perhaps a BOM, not all of it here yet */
			s->started = true;
			if (k == 3 && memcmp(p, BOM, 3) == 0) {
				s->pos += 3;
				continue;
			}
		}
		if (!line_at(p, n, &len, &term, &cr_last)) {
			if (s->buf.len > MCP_SSE_MAX_EVENT) {
				s->broken = true;
				return MCP_SSE_BROKEN;
			}
			return MCP_SSE_MORE;
		}
		s->pos += len + term;
		s->skip_lf = cr_last;
		if (len > 0) {
			if (p[0] != ':')
				field(s, p, len);
			continue;
		}
		/* A blank line: the event is complete. Its data loses its last LF. */
		if (s->has_data) {
			s->data.len--;
			s->data.data[s->data.len] = '\0';
		}
		s->end = s->pos;
	}
}

void mcp_sse_take(struct mcp_sse *s)
{
	if (s->end == 0)
		return;
	memmove(s->buf.data, s->buf.data + s->end, s->buf.len - s->end);
	s->buf.len -= s->end;
	if (s->buf.data != NULL)
		s->buf.data[s->buf.len] = '\0';
	s->pos -= s->end;
	s->end = 0;
	s->data.len = 0;
	s->head.len = 0;
	s->has_data = false;
}

const char *mcp_sse_held(const struct mcp_sse *s, size_t *len)
{
	*len = s->buf.len - s->end;
	return s->buf.data != NULL ? s->buf.data + s->end : "";
}

void mcp_sse_write(struct ledger_buf *out, const char *head, size_t head_len, const char *text,
		   size_t len)
{
	size_t i = 0;

	ledger_buf_append(out, head, head_len);
	do {
		size_t n = 0;

		while (i + n < len && text[i + n] != '\n' && text[i + n] != '\r')
			n++;
		ledger_buf_puts(out, "data: ");
		ledger_buf_append(out, text + i, n);
		ledger_buf_putc(out, '\n');
		i += n;
		/* CRLF, LF and CR end a line alike: the reader joins the lines with LF. */
		if (i + 1 < len && text[i] == '\r' && text[i + 1] == '\n')
			i++;
		if (i < len)
			i++;
	} while (i < len);
	ledger_buf_putc(out, '\n');
}

void mcp_sse_free(struct mcp_sse *s)
{
	if (s == NULL)
		return;
	ledger_buf_free(&s->buf);
	ledger_buf_free(&s->data);
	ledger_buf_free(&s->head);
	memset(s, 0, sizeof(*s));
}
