/*
 * bench/tracerecv.c -- the receiver of ratelimit's traced-link load (bench/traceload.py).
 *
 *   tracerecv DEVICE SECONDS OUT
 *
 * A packet socket on DEVICE with a receive ring (TPACKET_V3: the kernel fills blocks of
 * packets and wakes the reader once a block is full or 10 ms old, not once a packet) takes
 * the first 64 bytes of every IPv4 packet DEVICE receives (before netfilter, which may drop
 * them), with the kernel's receive time
 * (wall clock); for each UDP datagram it keeps (time ns, destination port, IP length).  It
 * says "ready" once bound, and stops 50 ms after the file OUT.stop appears (looked for every
 * 100 ms), or after SECONDS; then it writes the records to OUT: a count (int64) and the times
 * (int64), a count and the ports (int32), a count and the lengths (int32), native byte
 * order; and prints one line of JSON: "received" (the records) and "drops" (the packets the
 * ring had no room for, PACKET_STATISTICS).  Written for this project; compiled on first use
 * by bench/blast.py (cc -O2).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#define SNAP 64
#define BLOCK_BYTES (1 << 20)
#define BLOCKS 64

static int64_t *times, count, room;
static int32_t *ports, *lens;

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int write_array(FILE *f, const void *a, size_t size, int64_t n)
{
	return fwrite(&n, sizeof(n), 1, f) == 1 && fwrite(a, size, n, f) == (size_t)n;
}

/* the records of one block the kernel has handed over; 0 when out of memory */
static int take(struct tpacket_block_desc *block)
{
	struct tpacket3_hdr *h = (struct tpacket3_hdr *)((char *)block + block->hdr.bh1.offset_to_first_pkt);
	uint32_t k, n = block->hdr.bh1.num_pkts;

	if (count + n > room) {
		room = 2 * room + n + (1 << 20);
		times = realloc(times, room * sizeof(*times));
		ports = realloc(ports, room * sizeof(*ports));
		lens = realloc(lens, room * sizeof(*lens));
		if (!times || !ports || !lens)
			return 0;
	}
	for (k = 0; k < n; k++, h = (struct tpacket3_hdr *)((char *)h + h->tp_next_offset)) {
		unsigned char *p = (unsigned char *)h + h->tp_net;
		int hl = (p[0] & 15) * 4;

		if (h->tp_snaplen < 24 || p[9] != 17 || hl + 4 > (int)h->tp_snaplen)
			continue;
		times[count] = (int64_t)h->tp_sec * 1000000000 + h->tp_nsec;
		ports[count] = p[hl + 2] << 8 | p[hl + 3];
		lens[count] = p[2] << 8 | p[3];
		count++;
	}
	return 1;
}

int main(int argc, char **argv)
{
	struct sock_filter snap[] = {BPF_STMT(BPF_RET | BPF_K, SNAP)};  /* every packet, its first bytes */
	struct sock_fprog prog = {1, snap};
	struct tpacket_req3 req;
	struct sockaddr_ll sll;
	struct tpacket_stats_v3 stats;
	socklen_t len = sizeof(stats);
	int fd, version = TPACKET_V3, on = 1, next = 0;
	double end, next_look = 0, t;
	char stop[4096], *ring;
	struct pollfd pfd;
	struct stat st;
	FILE *f;

	if (argc != 4) {
		fprintf(stderr, "usage: tracerecv DEVICE SECONDS OUT\n");
		return 2;
	}
	snprintf(stop, sizeof(stop), "%s.stop", argv[3]);
	memset(&sll, 0, sizeof(sll));
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = htons(ETH_P_IP);
	sll.sll_ifindex = (int)if_nametoindex(argv[1]);
	if (sll.sll_ifindex == 0) {
		fprintf(stderr, "tracerecv: no device %s\n", argv[1]);
		return 2;
	}
	memset(&req, 0, sizeof(req));
	req.tp_block_size = BLOCK_BYTES;
	req.tp_block_nr = BLOCKS;
	req.tp_frame_size = 256;  /* a packet's header and its first SNAP bytes fit */
	req.tp_frame_nr = BLOCK_BYTES / 256 * BLOCKS;
	req.tp_retire_blk_tov = 10;  /* ms: a block not full is handed over this long after its first packet */
	fd = socket(AF_PACKET, SOCK_DGRAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0 ||
	    setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) {
		perror("tracerecv: packet socket");
		return 1;
	}
	ring = mmap(NULL, (size_t)BLOCK_BYTES * BLOCKS, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
	if (ring == MAP_FAILED)
		ring = mmap(NULL, (size_t)BLOCK_BYTES * BLOCKS, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ring == MAP_FAILED || bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
		perror("tracerecv: packet ring");
		return 1;
	}
	setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof(on));  /* the client's own replies */
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &stats, &len);  /* from here on (reading resets it) */
	printf("ready\n");
	fflush(stdout);
	pfd.fd = fd;
	pfd.events = POLLIN | POLLERR;
	end = wall_s() + atof(argv[2]);
	for (;;) {
		struct tpacket_block_desc *block = (struct tpacket_block_desc *)(ring + (size_t)next * BLOCK_BYTES);

		if (block->hdr.bh1.block_status & TP_STATUS_USER) {
			if (!take(block)) {
				fprintf(stderr, "tracerecv: out of memory at %lld records\n", (long long)count);
				return 1;
			}
			__atomic_store_n(&block->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
			next = (next + 1) % BLOCKS;
			continue;
		}
		t = wall_s();
		if (t >= end)
			break;
		if (t >= next_look) {
			next_look = t + 0.1;
			if (stat(stop, &st) == 0) {
				end = t + 0.05;  /* the blocks the kernel hands over meanwhile (10 ms) */
				next_look = end;
			}
		}
		poll(&pfd, 1, 100);
	}
	len = sizeof(stats);
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &stats, &len);
	f = fopen(argv[3], "wb");
	if (!f || !write_array(f, times, sizeof(*times), count) || !write_array(f, ports, sizeof(*ports), count) ||
	    !write_array(f, lens, sizeof(*lens), count) || fclose(f) != 0) {
		perror("tracerecv: writing the records");
		return 1;
	}
	printf("{\"received\": %lld, \"drops\": %u}\n", (long long)count, stats.tp_drops);
	return 0;
}
