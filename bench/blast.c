/*
 * bench/blast.c -- the UDP sender of ratelimit's per-packet benchmark.
 *
 *   blast ADDRESS PORT PAYLOAD_BYTES SECONDS
 *
 * Sends PAYLOAD_BYTES-byte UDP datagrams to ADDRESS:PORT (IPv4) as fast as the
 * kernel takes them, 64 per sendmmsg() call, for SECONDS seconds, then prints
 * "SENT ERRORS ELAPSED_S" on one line.  ENOBUFS, EAGAIN and ECONNREFUSED count
 * as errors and do not stop it.  Written for this project; compiled on first
 * use by bench/blast.py (cc -O2).
 */
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

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static char payload[65536];
	struct sockaddr_in dst;
	struct mmsghdr msgs[BATCH];
	struct iovec iov[BATCH];
	unsigned long long sent = 0, errors = 0;
	double start, stop, t;
	int fd, size, i;

	if (argc != 5) {
		fprintf(stderr, "usage: blast ADDRESS PORT PAYLOAD_BYTES SECONDS\n");
		return 2;
	}
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons((unsigned short)atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &dst.sin_addr) != 1) {
		fprintf(stderr, "blast: %s is not an IPv4 address\n", argv[1]);
		return 2;
	}
	size = atoi(argv[3]);
	if (size < 0 || size > 1472) {
		fprintf(stderr, "blast: payload %d is not within 0-1472 bytes\n", size);
		return 2;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		perror("blast: socket");
		return 1;
	}
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < BATCH; i++) {
		iov[i].iov_base = payload;
		iov[i].iov_len = (size_t)size;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	start = now();
	stop = start + atof(argv[4]);
	for (;;) {
		int n = sendmmsg(fd, msgs, BATCH, 0);
		if (n < 0) {
			if (errno != ENOBUFS && errno != EAGAIN && errno != ECONNREFUSED && errno != EINTR) {
				perror("blast: sendmmsg");
				return 1;
			}
			errors++;
		} else {
			sent += (unsigned long long)n;
		}
		t = now();
		if (t >= stop)
			break;
	}
	printf("%llu %llu %.6f\n", sent, errors, t - start);
	return 0;
}
