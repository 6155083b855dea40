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
#include "udpsend.h"

int main(int argc, char **argv)
{
	static char payload[65536];
	struct sockaddr_in dst;
	struct mmsghdr msgs[BATCH];
	struct iovec iov;
	unsigned long long sent = 0, errors = 0;
	double start, stop, t;
	int fd, size, n;

	if (argc != 5) {
		fprintf(stderr, "usage: blast ADDRESS PORT PAYLOAD_BYTES SECONDS\n");
		return 2;
	}
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons((unsigned short)atoi(argv[2]));
	if (!ipv4("blast", argv[1], &dst.sin_addr))
		return 2;
	size = payload_bytes("blast", argv[3]);
	if (size < 0)
		return 2;
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		perror("blast: socket");
		return 1;
	}
	iov.iov_base = payload;
	iov.iov_len = (size_t)size;
	batch(msgs, &iov, NULL, dst.sin_addr);
	start = now();
	stop = start + atof(argv[4]);
	for (;;) {
		n = send_batch("blast", fd, msgs, BATCH);
		if (n < 0)
			return 1;
		if (n == 0)
			errors++;
		sent += (unsigned long long)n;
		t = now();
		if (t >= stop)
			break;
	}
	printf("%llu %llu %.6f\n", sent, errors, t - start);
	return 0;
}
