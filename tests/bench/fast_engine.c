/*
 * tests/bench/fast_engine.c: an inference engine that answers at once, for
 * make bench's gateway point: what a proxy in front of it adds is then all
 * there is to measure.
 *
 * It serves OpenAI's POST /v1/chat/completions: with "stream": true, 20
 * SSE chunks of one token each (each an HTTP/1.1 chunk), a last chunk with
 * finish_reason "stop" and `data: [DONE]`, all written at once; without it,
 * the whole answer as one JSON body. To ledger-gateway's probes it looks
 * like llama.cpp's llama-server, the simplest kind it detects: GET /props
 * (200), /health and /v1/models. Keep-alive, a thread per connection.
 *
 * Usage: fast_engine [--listen HOST:PORT] [--tokens N] [--token-bytes B]
 * Port 0 picks a free one; the first line on stdout is `listening HOST:PORT`.
 * --token-bytes is each token's length ("x" repeated; default 4): 200 makes
 * an answer of about 4 KiB of content.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD 16384
#define MAX_BODY (1 << 20)

static int n_tokens = 20;
static int token_bytes = 4;
static char *stream_answer; /* the whole streamed body, chunked, built once */
static size_t stream_answer_len;
static char *whole_answer; /* the non-streamed JSON body, built once */
static size_t whole_answer_len;

struct buf {
	char *data;
	size_t len, cap;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;

		while (cap < b->len + n + 1)
			cap *= 2;
		b->data = realloc(b->data, cap);
		if (b->data == NULL)
			abort();
		b->cap = cap;
	}
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

static void buf_addf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_addf(struct buf *b, const char *fmt, ...)
{
	char tmp[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		abort();
	buf_add(b, tmp, (size_t)n);
}

/* One SSE event as one HTTP chunk. */
static void add_event(struct buf *out, const char *data)
{
	size_t n = strlen(data) + strlen("data: \n\n");

	buf_addf(out, "%zx\r\ndata: %s\n\n\r\n", n, data);
}

static void build_answers(void)
{
	struct buf s = {0}, w = {0}, content = {0};
	char *token = malloc((size_t)token_bytes + 1);
	long created = (long)time(NULL);

	if (token == NULL)
		abort();
	memset(token, 'x', (size_t)token_bytes);
	token[token_bytes] = '\0';
	for (int i = 0; i < n_tokens; i++) {
		struct buf ev = {0};

		buf_addf(&ev,
			 "{\"id\":\"chatcmpl-fast\",\"object\":\"chat.completion.chunk\","
			 "\"created\":%ld,\"model\":\"fast\",\"choices\":[{\"index\":0,\"delta\":"
			 "{%s\"content\":\"%s\"},\"finish_reason\":null}]}",
			 created, i == 0 ? "\"role\":\"assistant\"," : "", token);
		add_event(&s, ev.data);
		free(ev.data);
		buf_add(&content, token, strlen(token));
	}
	{
		struct buf ev = {0};

		buf_addf(
			&ev,
			"{\"id\":\"chatcmpl-fast\",\"object\":\"chat.completion.chunk\","
			"\"created\":%ld,\"model\":\"fast\",\"choices\":[{\"index\":0,\"delta\":{},"
			"\"finish_reason\":\"stop\"}]}",
			created);
		add_event(&s, ev.data);
		free(ev.data);
	}
	add_event(&s, "[DONE]");
	buf_add(&s, "0\r\n\r\n", 5);
	buf_addf(&w,
		 "{\"id\":\"chatcmpl-fast\",\"object\":\"chat.completion\",\"created\":%ld,"
		 "\"model\":\"fast\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
		 "\"content\":\"",
		 created);
	buf_add(&w, content.data, content.len);
	buf_addf(&w,
		 "\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,"
		 "\"completion_tokens\":%d,\"total_tokens\":%d}}",
		 n_tokens, n_tokens + 1);
	stream_answer = s.data;
	stream_answer_len = s.len;
	whole_answer = w.data;
	whole_answer_len = w.len;
	free(content.data);
	free(token);
}

static bool write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static bool reply(int fd, int status, const char *type, const char *body, bool close_after)
{
	char head[512];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n",
			 status,
			 status == 200   ? "OK"
			 : status == 404 ? "Not Found"
					 : "Bad Request",
			 type, strlen(body), close_after ? "Connection: close\r\n" : "");

	return write_all(fd, head, (size_t)n) && write_all(fd, body, strlen(body));
}

/* "stream": true in @body (a JSON object; the bench's bodies only). */
static bool wants_stream(const char *body)
{
	const char *p = strstr(body, "\"stream\"");

	if (p == NULL)
		return false;
	p += strlen("\"stream\"");
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == ':')
		p++;
	return strncmp(p, "true", 4) == 0;
}

/* The value of header @name in @head (lines after the request line), or NULL. */
static const char *header(const char *head, const char *name, size_t *len)
{
	size_t nlen = strlen(name);

	for (const char *line = strstr(head, "\r\n"); line != NULL && line[2] != '\r';
	     line = strstr(line + 2, "\r\n")) {
		const char *h = line + 2, *end = strstr(h, "\r\n");

		if (end == NULL)
			return NULL;
		if (strncasecmp(h, name, nlen) == 0 && h[nlen] == ':') {
			h += nlen + 1;
			while (*h == ' ' || *h == '\t')
				h++;
			*len = (size_t)(end - h);
			while (*len > 0 && (h[*len - 1] == ' ' || h[*len - 1] == '\t'))
				(*len)--;
			return h;
		}
	}
	return NULL;
}

struct conn {
	int fd;
	char in[MAX_HEAD + MAX_BODY];
	size_t len;
};

/* Reads until @c holds @need bytes; false on EOF or error. */
static bool fill(struct conn *c, size_t need)
{
	while (c->len < need) {
		ssize_t r;

		if (need > sizeof(c->in))
			return false;
		r = recv(c->fd, c->in + c->len, sizeof(c->in) - c->len, 0);
		if (r <= 0)
			return false;
		c->len += (size_t)r;
	}
	return true;
}

/* The offset just after the head's blank line, reading more as needed; 0 on EOF. */
static size_t read_head(struct conn *c)
{
	for (;;) {
		char *end = memmem(c->in, c->len, "\r\n\r\n", 4);

		if (end != NULL)
			return (size_t)(end - c->in) + 4;
		if (c->len >= MAX_HEAD || !fill(c, c->len + 1))
			return 0;
	}
}

/*
 * The request body after @head_len, de-chunked in place when chunked,
 * NUL-terminated; @used the bytes the request took. false on bad framing.
 */
static bool read_body(struct conn *c, size_t head_len, bool chunked, size_t length, char **body,
		      size_t *used)
{
	if (!chunked) {
		if (length > MAX_BODY || !fill(c, head_len + length))
			return false;
		*body = malloc(length + 1);
		if (*body == NULL)
			abort();
		memcpy(*body, c->in + head_len, length);
		(*body)[length] = '\0';
		*used = head_len + length;
		return true;
	}
	{
		size_t at = head_len, out = 0;
		char *b = malloc(MAX_BODY + 1);

		if (b == NULL)
			abort();
		for (;;) {
			char *eol;
			unsigned long n;

			for (;;) {
				eol = memmem(c->in + at, c->len - at, "\r\n", 2);
				if (eol != NULL)
					break;
				if (!fill(c, c->len + 1))
					goto bad;
			}
			n = strtoul(c->in + at, NULL, 16);
			at = (size_t)(eol - c->in) + 2;
			if (out + n > MAX_BODY || !fill(c, at + n + 2))
				goto bad;
			memcpy(b + out, c->in + at, n);
			out += n;
			at += n + 2;
			if (n == 0)
				break;
		}
		b[out] = '\0';
		*body = b;
		*used = at;
		return true;
	bad:
		free(b);
		return false;
	}
}

static void *serve(void *arg)
{
	struct conn *c = arg;
	int one = 1;

	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (;;) {
		size_t head_len = read_head(c), vlen = 0, used = 0, length = 0;
		char method[16] = "", target[256] = "", *body = NULL;
		const char *v;
		bool chunked = false, close_after = false, ok = true;

		if (head_len == 0)
			break;
		c->in[head_len - 2] = '\0'; /* the head ends at its last CRLF */
		if (sscanf(c->in, "%15s %255s", method, target) != 2)
			break;
		v = header(c->in, "Content-Length", &vlen);
		if (v != NULL)
			length = strtoul(v, NULL, 10);
		v = header(c->in, "Transfer-Encoding", &vlen);
		chunked = v != NULL && vlen >= 7 && strncasecmp(v + vlen - 7, "chunked", 7) == 0;
		v = header(c->in, "Connection", &vlen);
		close_after = v != NULL && vlen == 5 && strncasecmp(v, "close", 5) == 0;
		c->in[head_len - 2] = '\r';
		if (!read_body(c, head_len, chunked, length, &body, &used))
			break;
		memmove(c->in, c->in + used, c->len - used);
		c->len -= used;

		if (strcmp(method, "GET") == 0 && strcmp(target, "/health") == 0) {
			ok = reply(c->fd, 200, "application/json", "{\"status\":\"ok\"}",
				   close_after);
		} else if (strcmp(method, "GET") == 0 && strcmp(target, "/props") == 0) {
			ok = reply(c->fd, 200, "application/json",
				   "{\"model_path\":\"fast-engine\",\"chat_template\":\"bench\","
				   "\"total_slots\":64}",
				   close_after);
		} else if (strcmp(method, "GET") == 0 && strcmp(target, "/v1/models") == 0) {
			ok = reply(
				c->fd, 200, "application/json",
				"{\"object\":\"list\",\"data\":[{\"id\":\"fast\",\"object\":\"model\","
				"\"owned_by\":\"llamacpp\",\"meta\":{\"vocab_type\":1,"
				"\"n_vocab\":32000}}]}",
				close_after);
		} else if (strcmp(method, "POST") == 0 &&
			   strcmp(target, "/v1/chat/completions") == 0) {
			if (wants_stream(body)) {
				char head[256];
				int n = snprintf(
					head, sizeof(head),
					"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
					"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
					"%s\r\n",
					close_after ? "Connection: close\r\n" : "");
				struct buf all = {0};

				buf_add(&all, head, (size_t)n);
				buf_add(&all, stream_answer, stream_answer_len);
				ok = write_all(c->fd, all.data, all.len);
				free(all.data);
			} else {
				ok = reply(c->fd, 200, "application/json", whole_answer,
					   close_after);
			}
		} else {
			ok = reply(c->fd, 404, "application/json",
				   "{\"error\":{\"message\":\"not found\",\"type\":\"not_found\"}}",
				   close_after);
		}
		free(body);
		if (!ok || close_after)
			break;
	}
	close(c->fd);
	free(c);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *listen_at = "127.0.0.1:0";
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t alen = sizeof(addr);
	char host[64];
	int port = 0, fd, one = 1;
	pthread_attr_t attr;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
			listen_at = argv[++i];
		} else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
			n_tokens = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--token-bytes") == 0 && i + 1 < argc) {
			token_bytes = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: fast_engine [--listen HOST:PORT] [--tokens N] "
					"[--token-bytes B]\n");
			return 2;
		}
	}
	if (n_tokens < 1 || token_bytes < 1 || token_bytes > 4096 ||
	    sscanf(listen_at, "%63[^:]:%d", host, &port) != 2 ||
	    inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
		fprintf(stderr, "fast_engine: bad --listen, --tokens or --token-bytes\n");
		return 2;
	}
	build_answers();
	signal(SIGPIPE, SIG_IGN);
	addr.sin_port = htons((uint16_t)port);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    listen(fd, 1024) != 0 || getsockname(fd, (struct sockaddr *)&addr, &alen) != 0) {
		perror("fast_engine: listen");
		return 1;
	}
	printf("listening %s:%d\n", host, ntohs(addr.sin_port));
	fflush(stdout);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (;;) {
		int cfd = accept(fd, NULL, NULL);
		struct conn *c;
		pthread_t t;

		if (cfd < 0)
			continue;
		c = malloc(sizeof(*c));
		if (c == NULL)
			abort();
		c->fd = cfd;
		c->len = 0;
		if (pthread_create(&t, &attr, serve, c) != 0) {
			close(cfd);
			free(c);
		}
	}
}
