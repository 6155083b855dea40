/*
 * bench/tracesend.c -- the paced UDP sender of ratelimit's traced-link load (bench/traceload.py).
 *
 *   tracesend ADDRESS PAYLOAD_BYTES PLAN_FILE [LATE_FILE]
 *
 * PLAN_FILE is the schedule worked out in Python: a count (int64) and that many send
 * times (float64, ms of the wall clock, in order), then a count and that many client ports
 * (int32), native byte order.  Sends one PAYLOAD_BYTES-byte UDP datagram to ADDRESS:port at
 * each time: it sleeps until the next time is due and sends all that is due then, up to 64
 * per sendmmsg() call.  At the end it prints one line of JSON: "sent" (every datagram whose
 * time came), "errors" (those the kernel refused: ENOBUFS, EAGAIN, ECONNREFUSED; they do not
 * stop it), "cpu_s" (its user + system time), "late_ms" (the most
 * any datagram went after its time), "late_10ms" (how many went more than 10 ms late).
 * LATE_FILE, if given, gets how late each datagram went (ms): a count (int64) and that many
 * float32, in the plan's order, so the caller can tell when the load was on its plan.
 * Written for this project; compiled on first use by bench/blast.py (cc -O2).
 */
#include "udpsend.h"
#include <stdint.h>
#include <sys/resource.h>

static double wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *array(FILE *f, size_t size, int64_t *count)
{
	void *a;

	if (fread(count, sizeof(*count), 1, f) != 1 || *count < 0)
		return NULL;
	a = malloc(*count * size + 1);
	if (a && fread(a, size, *count, f) != (size_t)*count) {
		free(a);
		return NULL;
	}
	return a;
}

int main(int argc, char **argv)
{
	static char payload[1472];
	struct sockaddr_in dst[BATCH];
	struct mmsghdr msgs[BATCH];
	struct iovec iov;
	struct in_addr addr;
	struct rusage ru;
	int64_t count, nports, k = 0, late10 = 0;
	double *times, late = 0, t;
	float *lateness = NULL;
	int32_t *ports;
	int fd, size, i, n, sndbuf = 1 << 24;
	unsigned long long errors = 0;
	FILE *f;

	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: tracesend ADDRESS PAYLOAD_BYTES PLAN_FILE [LATE_FILE]\n");
		return 2;
	}
	if (!ipv4("tracesend", argv[1], &addr))
		return 2;
	size = payload_bytes("tracesend", argv[2]);
	if (size < 0)
		return 2;
	f = fopen(argv[3], "rb");
	times = f ? array(f, sizeof(*times), &count) : NULL;
	ports = times ? array(f, sizeof(*ports), &nports) : NULL;
	if (!ports || nports != count) {
		fprintf(stderr, "tracesend: %s is not a plan (times, then as many ports)\n", argv[3]);
		return 2;
	}
	fclose(f);
	if (argc == 5 && !(lateness = malloc(count * sizeof(*lateness) + 1))) {
		fprintf(stderr, "tracesend: no memory for %lld lateness records\n", (long long)count);
		return 1;
	}
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("tracesend: socket");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	iov.iov_base = payload;
	iov.iov_len = (size_t)size;
	batch(msgs, &iov, dst, addr);
	while (k < count) {
		t = wall_ms();
		if (times[k] > t) {
			struct timespec at;
			at.tv_sec = (time_t)(times[k] / 1e3);
			at.tv_nsec = (long)((times[k] - at.tv_sec * 1e3) * 1e6);
			clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL);
			t = wall_ms();
		}
		if (t - times[k] > late)
			late = t - times[k];
		for (n = 0; n < BATCH && k + n < count && times[k + n] <= t; n++) {
			if (t - times[k + n] > 10)
				late10++;
			if (lateness)
				lateness[k + n] = (float)(t - times[k + n]);
			dst[n].sin_port = htons((unsigned short)ports[k + n]);
		}
		if (n == 0)
			continue;  /* woken early */
		i = send_batch("tracesend", fd, msgs, n);
		if (i < 0)
			return 1;
		errors += n - i;  /* their time has come either way */
		k += n;
	}
	if (lateness) {
		f = fopen(argv[4], "wb");
		if (!f || fwrite(&count, sizeof(count), 1, f) != 1
		    || fwrite(lateness, sizeof(*lateness), count, f) != (size_t)count || fclose(f) != 0) {
			perror("tracesend: LATE_FILE");
			return 1;
		}
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"sent\": %lld, \"errors\": %llu, \"cpu_s\": %.2f, \"late_ms\": %.1f, "
	       "\"late_10ms\": %lld}\n", (long long)count, errors,
	       ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
	       late, (long long)late10);
	return 0;
}
