/*
 * api/wire/addrs.c: the count of open connections per client address, under
 * the net's lock, for --max-connections-per-address (api/wire/net_int.h):
 * an IPv4 address whole, an IPv4-mapped IPv6 address as that IPv4 address,
 * an IPv6 peer by its /64.
 */
#include "api/wire/net_int.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static unsigned addr_hash(const unsigned char key[17])
{
	unsigned h = 2166136261u;

	for (int i = 0; i < 17; i++)
		h = (h ^ key[i]) * 16777619u;
	return h & (ADDR_BUCKETS - 1);
}

/*
 * The address's key; IPv4 mapped into IPv6 counts as IPv4. An IPv6 peer
 * counts by its /64: one host is given a whole /64 and can connect from
 * any of its addresses, so a key of the whole address would give it a
 * slot budget per address.
 */
void wire_addrs_key(const struct sockaddr_storage *ss, unsigned char key[17])
{
	memset(key, 0, 17);
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const void *)ss;

		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
			key[0] = 4;
			memcpy(key + 1, in6->sin6_addr.s6_addr + 12, 4);
		} else {
			key[0] = 6;
			memcpy(key + 1, in6->sin6_addr.s6_addr, 8);
		}
	} else if (ss->ss_family == AF_INET) {
		key[0] = 4;
		memcpy(key + 1, &((const struct sockaddr_in *)(const void *)ss)->sin_addr, 4);
	}
}

/* Counts one more connection from @p key. @return NULL when the address is at its limit */
struct addr_count *wire_addrs_take(struct wire_net *net, const unsigned char key[17], bool *full)
{
	unsigned b = addr_hash(key);
	struct addr_count *a;

	*full = false;
	pthread_mutex_lock(&net->lock);
	for (a = net->addrs[b]; a != NULL; a = a->next) {
		if (memcmp(a->key, key, 17) == 0)
			break;
	}
	if (a != NULL && a->count >= net->cfg.max_per_address) {
		*full = true;
		a = NULL;
	} else if (a == NULL && (a = calloc(1, sizeof(*a))) != NULL) {
		memcpy(a->key, key, 17);
		a->next = net->addrs[b];
		net->addrs[b] = a;
	}
	if (a != NULL)
		a->count++;
	pthread_mutex_unlock(&net->lock);
	return a;
}

void wire_addrs_give(struct wire_net *net, struct addr_count *a)
{
	unsigned b;

	if (a == NULL)
		return;
	b = addr_hash(a->key);
	pthread_mutex_lock(&net->lock);
	if (--a->count == 0) {
		struct addr_count **pp = &net->addrs[b];

		while (*pp != a)
			pp = &(*pp)->next;
		*pp = a->next;
		free(a);
	}
	pthread_mutex_unlock(&net->lock);
}
