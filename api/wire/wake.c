/*
 * api/wire/wake.c: the list through which other threads hand connections
 * back to their polling thread: a thread that held a call lets go of it
 * (WIRE_WAKE_RELEASE), or a stream's thread has bytes for the client
 * (WIRE_WAKE_KICK). A connection is on the list at most once, with every
 * ask since the last take; the loop's eventfd is written only when the
 * list was empty, so a burst of wakes costs the loop one.
 */
#include "api/wire/net_int.h"

#include <stdint.h>
#include <unistd.h>

void wire_wake_push(struct wire_conn *c, unsigned what)
{
	struct loop *l = c->loop;
	uint64_t one = 1;
	bool first = false;

	pthread_mutex_lock(&l->wake_lock);
	c->wake_what |= what;
	if (!c->wake_listed) {
		c->wake_listed = true;
		first = l->woken == NULL;
		c->wake_next = l->woken;
		l->woken = c;
	}
	pthread_mutex_unlock(&l->wake_lock);
	if (first && write(l->wakefd, &one, sizeof(one)) < 0) {
		/* The counter is only full when the loop is far behind; it will see the list. */
	}
}

struct wire_conn *wire_wake_take(struct loop *l)
{
	struct wire_conn *c, *taken = NULL;

	pthread_mutex_lock(&l->wake_lock);
	/* Pushed newest first: reversed, they are handed back in the order they came. */
	for (c = l->woken; c != NULL; c = c->wake_next) {
		c->taken_what = c->wake_what;
		c->wake_what = 0;
		c->wake_listed = false;
		c->taken_next = taken;
		taken = c;
	}
	l->woken = NULL;
	pthread_mutex_unlock(&l->wake_lock);
	return taken;
}
