/*
 * bench/udpsend.h -- what ratelimit's C UDP senders (blast.c, pace.c, tracesend.c) share:
 * the clock, the IPv4 address and payload size arguments, a batch of messages on one payload, and a
 * sendmmsg() that counts the kernel's refusals instead of stopping.
 * Written for this project; compiled into each sender by bench/blast.py (cc -O2).
 */
#ifndef UDPSEND_H
#define UDPSEND_H
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64

static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* TEXT as an IPv4 address into *ADDR; else says so (as PROG) and returns 0 */
static inline int ipv4(const char *prog, const char *text, struct in_addr *addr)
{
	if (inet_pton(AF_INET, text, addr) == 1)
		return 1;
	fprintf(stderr, "%s: %s is not an IPv4 address\n", prog, text);
	return 0;
}

/* TEXT as a UDP payload's size in bytes (0-1472: one Ethernet frame), else says so and returns -1 */
static inline int payload_bytes(const char *prog, const char *text)
{
	int size = atoi(text);

	if (size >= 0 && size <= 1472)
		return size;
	fprintf(stderr, "%s: payload %s is not within 0-1472 bytes\n", prog, text);
	return -1;
}

/* BATCH messages each of IOV (one payload); each addressed to its own DST[i] at ADDR (port
 * set per send), or none when DST is NULL (a connected socket) */
static inline void batch(struct mmsghdr *msgs, struct iovec *iov, struct sockaddr_in *dst, struct in_addr addr)
{
	int i;

	memset(msgs, 0, sizeof(*msgs) * BATCH);
	for (i = 0; i < BATCH; i++) {
		if (dst) {
			memset(&dst[i], 0, sizeof(dst[i]));
			dst[i].sin_family = AF_INET;
			dst[i].sin_addr = addr;
			msgs[i].msg_hdr.msg_name = &dst[i];
			msgs[i].msg_hdr.msg_namelen = sizeof(dst[i]);
		}
		msgs[i].msg_hdr.msg_iov = iov;
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
}

/* sendmmsg() of the first N: how many the kernel took, 0 when it refused them (ENOBUFS,
 * EAGAIN, ECONNREFUSED, EINTR), -1 on any other error (said, as PROG) */
static inline int send_batch(const char *prog, int fd, struct mmsghdr *msgs, int n)
{
	int sent = sendmmsg(fd, msgs, n, 0);

	if (sent >= 0)
		return sent;
	if (errno == ENOBUFS || errno == EAGAIN || errno == ECONNREFUSED || errno == EINTR)
		return 0;
	fprintf(stderr, "%s: sendmmsg: %s\n", prog, strerror(errno));
	return -1;
}

#endif
