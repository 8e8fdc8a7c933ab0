/*
 * tests/bench/streams.c: a load generator of streamed chat completions, for
 * make bench's gateway point.
 *
 * Opens N keep-alive connections to URL; each loops for the given seconds:
 * POST /v1/chat/completions with a streamed body, read the whole SSE
 * answer, again. Then prints one JSON line: streams per second (streams
 * that ended within the seconds, over the seconds), the time to first byte
 * and the time to the end, p50 and p99 in microseconds, and the errors.
 *
 * Time to first byte (ttfb): from the moment the request's last byte was
 * handed to the kernel (send() returned) to the moment the recv() that
 * brought the first byte of the body's first `data:` event returned. The
 * response head, and a body's bytes before that event, do not count as the
 * first byte: a proxy that sends its head early has not answered yet.
 * Time to the end (total): from the same moment to the recv() that brought
 * the stream's last byte.
 *
 * A stream is good when its status is 200, it ends with `data: [DONE]` and
 * it carried at least one other `data:` event; anything else, a connect or
 * read failure included, is an error (and the connection is opened again).
 *
 * Usage: streams --url http://HOST:PORT[/PATH] [--concurrency N] [--seconds S]
 *                [--header "Name: value"]... [--key-header NAME] [--body FILE]
 * (S may have a fraction.)
 * --key-header NAME adds "NAME: <a key of its own>" to every request (an
 * Idempotency-Key, so that each request is a logical request of its own).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADERS 8
#define MAX_IN (1 << 20)

static struct sockaddr_in target;
static char host_header[128];
static char path[512] = "/v1/chat/completions";
static const char *headers[MAX_HEADERS];
static int n_headers;
static const char *key_header;
static char *body;
static size_t body_len;
static double deadline; /* monotonic seconds */
static atomic_long key_seq;
static unsigned long long key_nonce; /* this run's: keys never repeat an earlier run's */

struct samples {
	long *v;
	size_t n, cap;
};

struct worker {
	pthread_t thread;
	int id;
	struct samples ttfb, total;
	long streams, errors, events_min, events_max, bytes;
	char *in;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void add(struct samples *s, long v)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		s->v = realloc(s->v, s->cap * sizeof(long));
		if (s->v == NULL)
			abort();
	}
	s->v[s->n++] = v;
}

static int connect_once(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	struct timeval tv = {.tv_sec = 30};

	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&target, sizeof(target)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const char *p, size_t n)
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

/* The response being read: the head, then the body, de-chunked when chunked. */
struct response {
	size_t head_len; /* 0 until the head is in */
	int status;
	bool chunked, close_after, has_length;
	size_t length;     /* Content-Length */
	size_t at;         /* the next raw byte to decode */
	size_t chunk_left; /* bytes of the current chunk still to come */
	bool chunk_crlf;   /* the CRLF after a chunk's data is due */
	bool last_chunk;   /* ... and it ends the body */
	bool done;
	char *body; /* the decoded body */
	size_t body_len;
	size_t data_at; /* where the first "data:" starts, or SIZE_MAX */
};

static const char *find_header(const char *head, size_t len, const char *name, size_t *vlen)
{
	size_t nlen = strlen(name);
	const char *end = head + len;

	for (const char *line = memmem(head, len, "\r\n", 2); line != NULL && line + 2 < end;
	     line = memmem(line + 2, (size_t)(end - line - 2), "\r\n", 2)) {
		const char *h = line + 2;
		const char *eol = memmem(h, (size_t)(end - h), "\r\n", 2);

		if (eol == NULL || eol == h)
			return NULL;
		if ((size_t)(eol - h) > nlen && strncasecmp(h, name, nlen) == 0 && h[nlen] == ':') {
			h += nlen + 1;
			while (*h == ' ' || *h == '\t')
				h++;
			*vlen = (size_t)(eol - h);
			return h;
		}
	}
	return NULL;
}

/* Decodes what @in holds up to @len; false on bad framing. */
static bool decode(struct response *r, const char *in, size_t len)
{
	if (r->head_len == 0) {
		const char *end = memmem(in, len, "\r\n\r\n", 4), *v;
		size_t vlen = 0;

		if (end == NULL)
			return true;
		r->head_len = (size_t)(end - in) + 4;
		if (sscanf(in, "HTTP/1.%*d %d", &r->status) != 1)
			return false;
		v = find_header(in, r->head_len, "Transfer-Encoding", &vlen);
		r->chunked = v != NULL && vlen >= 7 && strncasecmp(v + vlen - 7, "chunked", 7) == 0;
		v = find_header(in, r->head_len, "Content-Length", &vlen);
		r->has_length = v != NULL;
		r->length = v != NULL ? strtoul(v, NULL, 10) : 0;
		v = find_header(in, r->head_len, "Connection", &vlen);
		r->close_after = v != NULL && vlen >= 5 && strncasecmp(v, "close", 5) == 0;
		r->at = r->head_len;
	}
	while (r->at < len && !r->done) {
		if (!r->chunked) {
			size_t n = len - r->at;

			if (r->has_length && r->body_len + n > r->length)
				n = r->length - r->body_len;
			memcpy(r->body + r->body_len, in + r->at, n);
			r->body_len += n;
			r->at += n;
			if (r->has_length && r->body_len == r->length)
				r->done = true;
		} else if (r->chunk_left > 0) {
			size_t n = len - r->at < r->chunk_left ? len - r->at : r->chunk_left;

			memcpy(r->body + r->body_len, in + r->at, n);
			r->body_len += n;
			r->at += n;
			r->chunk_left -= n;
			r->chunk_crlf = r->chunk_left == 0;
		} else if (r->chunk_crlf) {
			if (len - r->at < 2)
				return true;
			if (memcmp(in + r->at, "\r\n", 2) != 0)
				return false;
			r->at += 2;
			r->chunk_crlf = false;
			r->done = r->last_chunk;
		} else {
			const char *eol = memmem(in + r->at, len - r->at, "\r\n", 2);
			unsigned long n;

			if (eol == NULL)
				return true;
			n = strtoul(in + r->at, NULL, 16);
			r->at = (size_t)(eol - in) + 2;
			if (n == 0) {
				/* The last chunk: no trailers here, so its CRLF ends the body. */
				r->chunk_crlf = true;
				r->last_chunk = true;
			} else {
				if (r->body_len + n > MAX_IN)
					return false;
				r->chunk_left = n;
			}
		}
	}
	r->body[r->body_len] = '\0';
	return true;
}

/* The number of "data:" events at the start of a line in @body, and whether [DONE] ended it. */
static long count_events(const char *body, bool *done)
{
	long n = 0;
	const char *last = NULL;

	for (const char *p = body; (p = strstr(p, "data:")) != NULL; p += 5) {
		if (p == body || p[-1] == '\n') {
			n++;
			last = p;
		}
	}
	*done = last != NULL && strncmp(last + 5 + (last[5] == ' '), "[DONE]", 6) == 0;
	return n;
}

/* Sends one request on @p fd: its head (a fresh key when asked) and its body. */
static bool send_request(struct worker *w, int fd)
{
	char req[16384];
	int n;

	n = snprintf(req, sizeof(req),
		     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
		     "Accept: text/event-stream\r\nContent-Length: %zu\r\n",
		     path, host_header, body_len);
	for (int i = 0; i < n_headers; i++)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "%s\r\n", headers[i]);
	if (key_header != NULL)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "%s: bench-%llx-%d-%ld\r\n",
			      key_header, key_nonce, w->id, atomic_fetch_add(&key_seq, 1));
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
	if ((size_t)n >= sizeof(req))
		return false;
	/* The head and the body in one send: one segment, as most clients send it. */
	if ((size_t)n + body_len < sizeof(req)) {
		memcpy(req + n, body, body_len);
		return send_all(fd, req, (size_t)n + body_len);
	}
	return send_all(fd, req, (size_t)n) && send_all(fd, body, body_len);
}

static void *run(void *arg)
{
	struct worker *w = arg;
	char *decoded = malloc(MAX_IN + 1);
	int fd = -1;

	w->in = malloc(MAX_IN + 1);
	if (w->in == NULL || decoded == NULL)
		abort();
	while (now() < deadline) {
		size_t len = 0;
		double sent, first = 0, last = 0, prev_recv = 0;
		size_t prev_body_len = 0;
		struct response r = {.body = decoded, .data_at = SIZE_MAX};
		bool events_done = false, ok = false, reused = fd >= 0, closed_idle = false;
		long events = 0;

		if (fd < 0 && (fd = connect_once()) < 0) {
			w->errors++;
			usleep(1000);
			continue;
		}
		if (!send_request(w, fd)) {
			close(fd);
			fd = -1;
			w->errors++;
			continue;
		}
		sent = now();
		while (!r.done) {
			ssize_t got = recv(fd, w->in + len, MAX_IN - len, 0);
			double t;

			if (got <= 0) {
				/* A body without length or chunks ends with the connection. */
				if (got == 0 && r.head_len > 0 && !r.chunked && !r.has_length)
					r.done = true;
				/* A server may close a kept-alive connection it found idle: again, anew. */
				closed_idle = got == 0 && len == 0 && reused;
				break;
			}
			t = now();
			prev_body_len = r.body_len;
			len += (size_t)got;
			if (!decode(&r, w->in, len))
				break;
			if (r.data_at == SIZE_MAX && r.body_len > 0) {
				/* A "data:" split across two reads began in the earlier one. */
				size_t from = prev_body_len > 4 ? prev_body_len - 4 : 0;
				char *d = memmem(r.body + from, r.body_len - from, "data:", 5);

				if (d != NULL) {
					r.data_at = (size_t)(d - r.body);
					first = r.data_at < prev_body_len ? prev_recv : t;
				}
			}
			prev_recv = t;
			last = t;
			if (len == MAX_IN)
				break;
		}
		if (r.done && r.status == 200) {
			events = count_events(r.body, &events_done);
			ok = events_done && events >= 2 && r.data_at != SIZE_MAX;
		}
		if (!ok) {
			w->errors += !closed_idle;
			close(fd);
			fd = -1;
			continue;
		}
		if (last <= deadline) {
			w->streams++;
			add(&w->ttfb, (long)((first - sent) * 1e6));
			add(&w->total, (long)((last - sent) * 1e6));
			w->bytes += (long)r.body_len;
			if (w->events_min == 0 || events - 1 < w->events_min)
				w->events_min = events - 1;
			if (events - 1 > w->events_max)
				w->events_max = events - 1;
		}
		/* Bytes past the body would be a framing error: the client sends one at a time. */
		if (r.close_after || r.at != len) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0)
		close(fd);
	free(decoded);
	free(w->in);
	return NULL;
}

static int cmp_long(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return x < y ? -1 : x > y;
}

static long pct(struct samples *s, double q)
{
	size_t i;

	if (s->n == 0)
		return -1;
	i = (size_t)(q * (double)s->n);
	return s->v[i < s->n ? i : s->n - 1];
}

static void merge(struct samples *into, const struct samples *from)
{
	for (size_t i = 0; i < from->n; i++)
		add(into, from->v[i]);
}

static char *read_file(const char *name, size_t *len)
{
	FILE *f = fopen(name, "rb");
	char *p = NULL;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0 || (p = malloc((size_t)n + 1)) == NULL ||
	    fread(p, 1, (size_t)n, f) != (size_t)n) {
		if (f != NULL)
			fclose(f);
		free(p);
		return NULL;
	}
	fclose(f);
	p[n] = '\0';
	*len = (size_t)n;
	return p;
}

int main(int argc, char **argv)
{
	const char *url = NULL, *body_file = NULL;
	int concurrency = 1, port = 0;
	double seconds = 5;
	char host[64];
	struct worker *workers;
	struct samples ttfb = {0}, total = {0};
	long streams = 0, errors = 0, events_min = 0, events_max = 0, bytes = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
			url = argv[++i];
		} else if (strcmp(argv[i], "--concurrency") == 0 && i + 1 < argc) {
			concurrency = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			seconds = atof(argv[++i]);
		} else if (strcmp(argv[i], "--header") == 0 && i + 1 < argc &&
			   n_headers < MAX_HEADERS) {
			headers[n_headers++] = argv[++i];
		} else if (strcmp(argv[i], "--key-header") == 0 && i + 1 < argc) {
			key_header = argv[++i];
		} else if (strcmp(argv[i], "--body") == 0 && i + 1 < argc) {
			body_file = argv[++i];
		} else {
			url = NULL;
			break;
		}
	}
	if (url == NULL || concurrency < 1 || !(seconds > 0) ||
	    sscanf(url, "http://%63[^:/]:%d%511s", host, &port, path) < 2 || port <= 0 ||
	    port > 65535 || inet_pton(AF_INET, host, &target.sin_addr) != 1) {
		fprintf(stderr, "usage: streams --url http://IPV4:PORT[/PATH] [--concurrency N] "
				"[--seconds S] [--header \"Name: value\"]... [--key-header NAME] "
				"[--body FILE]\n");
		return 2;
	}
	target.sin_family = AF_INET;
	target.sin_port = htons((uint16_t)port);
	snprintf(host_header, sizeof(host_header), "%s:%d", host, port);
	if (body_file != NULL) {
		body = read_file(body_file, &body_len);
		if (body == NULL) {
			perror(body_file);
			return 2;
		}
	} else {
		body = strdup("{\"model\":\"fast\",\"messages\":[{\"role\":\"user\",\"content\":"
			      "\"Say hello.\"}],\"stream\":true}");
		body_len = strlen(body);
	}
	signal(SIGPIPE, SIG_IGN);
	workers = calloc((size_t)concurrency, sizeof(*workers));
	if (workers == NULL)
		abort();
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		key_nonce = ((unsigned long long)ts.tv_sec * 1000000000ULL +
			     (unsigned long long)ts.tv_nsec) ^
			    ((unsigned long long)getpid() << 40);
	}
	deadline = now() + seconds;
	for (int i = 0; i < concurrency; i++) {
		workers[i].id = i;
		if (pthread_create(&workers[i].thread, NULL, run, &workers[i]) != 0) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < concurrency; i++) {
		struct worker *w = &workers[i];

		pthread_join(w->thread, NULL);
		streams += w->streams;
		errors += w->errors;
		bytes += w->bytes;
		if (w->events_min > 0 && (events_min == 0 || w->events_min < events_min))
			events_min = w->events_min;
		if (w->events_max > events_max)
			events_max = w->events_max;
		merge(&ttfb, &w->ttfb);
		merge(&total, &w->total);
		free(w->ttfb.v);
		free(w->total.v);
	}
	qsort(ttfb.v, ttfb.n, sizeof(long), cmp_long);
	qsort(total.v, total.n, sizeof(long), cmp_long);
	printf("{\"streams\":%ld,\"seconds\":%g,\"concurrency\":%d,\"streams_per_s\":%.1f,"
	       "\"ttfb_p50_us\":%ld,\"ttfb_p99_us\":%ld,\"total_p50_us\":%ld,\"total_p99_us\":%ld,"
	       "\"errors\":%ld,\"events_min\":%ld,\"events_max\":%ld,\"body_bytes_per_stream\":%ld}\n",
	       streams, seconds, concurrency, (double)streams / seconds, pct(&ttfb, 0.5),
	       pct(&ttfb, 0.99), pct(&total, 0.5), pct(&total, 0.99), errors, events_min,
	       events_max, streams ? bytes / streams : 0);
	free(ttfb.v);
	free(total.v);
	free(workers);
	free(body);
	return 0;
}
