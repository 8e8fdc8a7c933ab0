/*
 * api/wire/listen.c: the listening sockets of api/wire/listen.h: TCP on a
 * name or an address (v4 or [v6]), or a unix socket, opened before a server
 * starts so that an address taken or mistyped fails at once; and the room
 * the process's file limit leaves for connections.
 */
#include "api/wire/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int listen_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path too long");
		return -1;
	}
	strcpy(sa.sun_path, path);
	/* A socket left by an earlier run is replaced; any other file is not. */
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0) {
		snprintf(err, errlen, "cannot listen on unix:%s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int listen_tcp(const char *spec, char *bound, size_t boundlen, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	const char *h = host;
	struct addrinfo hints, *ai = NULL;
	int fd = -1, one = 1, gai;
	size_t hlen;

	if (colon == NULL || colon == spec || colon[1] == '\0') {
		snprintf(err, errlen, "expected HOST:PORT, [V6]:PORT or unix:/path");
		return -2;
	}
	hlen = (size_t)(colon - spec);
	if (hlen >= sizeof(host)) {
		snprintf(err, errlen, "host too long");
		return -2;
	}
	memcpy(host, spec, hlen);
	host[hlen] = '\0';
	if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
		host[hlen - 1] = '\0';
		h = host + 1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	gai = getaddrinfo(h, colon + 1, &hints, &ai);
	if (gai != 0) {
		snprintf(err, errlen, "%s: %s", spec, gai_strerror(gai));
		return -2;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
		snprintf(err, errlen, "cannot listen on %s: %s", spec, strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	{
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char addr[INET6_ADDRSTRLEN] = "?";
		unsigned port = 0;

		getsockname(fd, (struct sockaddr *)&ss, &sl);
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &in->sin_addr, addr, sizeof(addr));
			port = ntohs(in->sin_port);
			snprintf(bound, boundlen, "%s:%u", addr, port);
		} else {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &in6->sin6_addr, addr, sizeof(addr));
			port = ntohs(in6->sin6_port);
			snprintf(bound, boundlen, "[%s]:%u", addr, port);
		}
	}
	return fd;
}

int wire_listen_open(const char *spec, char *bound, size_t boundlen, char *err, size_t errlen)
{
	if (strncmp(spec, "unix:", 5) == 0) {
		if (spec[5] != '/') {
			snprintf(err, errlen, "unix: needs an absolute path");
			return -2;
		}
		snprintf(bound, boundlen, "%s", spec);
		return listen_unix(spec + 5, err, errlen);
	}
	return listen_tcp(spec, bound, boundlen, err, errlen);
}

/* True when @p fd listens on a loopback address or a unix socket. */
bool wire_listen_private(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
		return false;
	if (ss.ss_family == AF_UNIX)
		return true;
	if (ss.ss_family == AF_INET)
		return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

unsigned wire_listen_room(unsigned wanted, unsigned reserved)
{
	struct rlimit rl;
	rlim_t reserve = (rlim_t)reserved + 64;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return wanted;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		(void)getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)wanted + reserve)
		return wanted;
	if (rl.rlim_cur <= reserve + 16)
		return 16;
	return (unsigned)(rl.rlim_cur - reserve);
}
