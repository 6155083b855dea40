/*
 * bench/pace.c -- the paced UDP senders of ratelimit's shaped-load benchmark.
 *
 *   pace ADDRESS FIRST_PORT COUNT PAYLOAD_BYTES PACKETS_PER_S SECONDS
 *
 * Sends PAYLOAD_BYTES-byte UDP datagrams to ADDRESS (IPv4), ports FIRST_PORT ..
 * FIRST_PORT + COUNT - 1 in turn, PACKETS_PER_S in all, evenly: every port gets one
 * datagram each COUNT / PACKETS_PER_S seconds.  It wakes every millisecond and sends
 * what is due since the start (batches of up to 64 per sendmmsg() call), so a late
 * wake-up is made up at the next one.  After SECONDS it prints
 * "SENT ERRORS ELAPSED_S LATE" on one line: SENT counts every datagram whose turn
 * came, ERRORS those the kernel refused (ENOBUFS, EAGAIN, ECONNREFUSED; they do not
 * stop it), LATE the wake-ups that found more than 10 ms due.
 * Written for this project; compiled on first use by bench/blast.py (cc -O2).
 */
#include "udpsend.h"

int main(int argc, char **argv)
{
	static char payload[1472];
	struct sockaddr_in dst[BATCH];
	struct mmsghdr msgs[BATCH];
	struct iovec iov;
	unsigned long long sent = 0, errors = 0, late = 0, due;
	double start, t, pps, seconds;
	int fd, size, i, n, first, count, next = 0;
	struct in_addr addr;
	struct timespec tick = {0, 1000000};

	if (argc != 7) {
		fprintf(stderr, "usage: pace ADDRESS FIRST_PORT COUNT PAYLOAD_BYTES PACKETS_PER_S SECONDS\n");
		return 2;
	}
	if (!ipv4("pace", argv[1], &addr))
		return 2;
	first = atoi(argv[2]);
	count = atoi(argv[3]);
	size = atoi(argv[4]);
	pps = atof(argv[5]);
	seconds = atof(argv[6]);
	if (first < 1 || count < 1 || first + count - 1 > 65535) {
		fprintf(stderr, "pace: ports %s+%s are not within 1-65535\n", argv[2], argv[3]);
		return 2;
	}
	if (size < 0 || size > 1472 || pps <= 0 || seconds <= 0) {
		fprintf(stderr, "pace: payload 0-1472 bytes, a positive rate and time\n");
		return 2;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("pace: socket");
		return 1;
	}
	iov.iov_base = payload;
	iov.iov_len = size;
	batch(msgs, &iov, dst, addr);
	start = now();
	for (;;) {
		t = now() - start;
		if (t >= seconds)
			break;
		due = (unsigned long long)(pps * t) - sent;
		if (due > pps / 100)
			late++;
		while (due > 0) {
			n = due < BATCH ? (int)due : BATCH;
			for (i = 0; i < n; i++) {
				dst[i].sin_port = htons((unsigned short)(first + next));
				next = next + 1 == count ? 0 : next + 1;
			}
			i = send_batch("pace", fd, msgs, n);
			if (i < 0)
				return 1;
			errors += n - i;  /* the batch's ports have had their turn either way */
			sent += n;
			due -= n;
		}
		clock_nanosleep(CLOCK_MONOTONIC, 0, &tick, NULL);
	}
	printf("%llu %llu %.6f %llu\n", sent, errors, now() - start, late);
	return 0;
}
