// SPDX-License-Identifier: MIT
/* The traffic of a guest: one flow to a sink, run by the guest's init with the arguments the
 * kernel command line gives (tacc.run=...), until the guest is stopped.
 *
 *   traffic tcp DST PORT SRC_PORT            a bulk TCP flow, the guest kernel's own TCP
 *   traffic udp DST PORT SRC_PORT RATE_BPS   1500 B IPv4 packets at RATE_BPS
 *
 * The source port is fixed so that the sink can tell its flows apart. A TCP connection that is
 * refused (the sink is not listening yet) or reset is opened again. Each state change is one
 * line on the console, which the host reads. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define UDP_PAYLOAD 1472 /* a 1500 B IPv4 packet */
#define RETRY_NS 200000000L

static char buf[65536];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t when)
{
	struct timespec ts = { (time_t)(when / 1000000000u), (long)(when % 1000000000u) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int bound_socket(int type, uint16_t src_port)
{
	int fd = socket(AF_INET, type, 0);
	if (fd < 0) {
		perror("tacc-guest: socket");
		exit(1);
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(src_port) };
	if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
		perror("tacc-guest: bind");
		exit(1);
	}
	return fd;
}

static void tcp(const struct sockaddr_in *dst, uint16_t src_port)
{
	for (;;) {
		int fd = bound_socket(SOCK_STREAM, src_port);
		if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) < 0) {
			close(fd);
			sleep_until(now_ns() + RETRY_NS);
			continue;
		}
		printf("tacc-guest: tcp connected\n");
		fflush(stdout);
		/* MSG_NOSIGNAL: a reset ends the connection, not the program. */
		while (send(fd, buf, sizeof(buf), MSG_NOSIGNAL) > 0)
			;
		printf("tacc-guest: tcp closed (%s)\n", strerror(errno));
		fflush(stdout);
		close(fd);
	}
}

static void udp(const struct sockaddr_in *dst, uint16_t src_port, uint64_t rate_bps)
{
	int fd = bound_socket(SOCK_DGRAM, src_port);
	if (connect(fd, (const struct sockaddr *)dst, sizeof(*dst)) < 0) {
		perror("tacc-guest: connect");
		exit(1);
	}
	/* Each packet is due 1500 B at RATE_BPS after the one before; a source that falls
	 * behind sends what it owes at once rather than losing it. */
	uint64_t gap_ns = 1500ull * 8 * 1000000000ull / rate_bps;
	uint64_t due = now_ns();
	printf("tacc-guest: udp sending\n");
	fflush(stdout);
	for (;;) {
		sleep_until(due);
		/* ENOBUFS and the like: the packet is lost, as a NIC's full queue loses it. */
		(void)send(fd, buf, UDP_PAYLOAD, 0);
		due += gap_ns;
	}
}

static uint16_t port_arg(const char *s)
{
	long v = strtol(s, NULL, 10);
	if (v <= 0 || v > 65535) {
		fprintf(stderr, "tacc-guest: bad port %s\n", s);
		exit(2);
	}
	return (uint16_t)v;
}

int main(int argc, char **argv)
{
	if (argc < 5 || (strcmp(argv[1], "udp") == 0 && argc < 6)) {
		fprintf(stderr, "usage: traffic tcp|udp DST PORT SRC_PORT [RATE_BPS]\n");
		return 2;
	}
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port_arg(argv[3])) };
	if (inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1) {
		fprintf(stderr, "tacc-guest: bad address %s\n", argv[2]);
		return 2;
	}
	uint16_t src_port = port_arg(argv[4]);
	if (strcmp(argv[1], "tcp") == 0) {
		tcp(&dst, src_port);
	} else if (strcmp(argv[1], "udp") == 0) {
		uint64_t rate = strtoull(argv[5], NULL, 10);
		if (rate == 0) {
			fprintf(stderr, "tacc-guest: bad rate %s\n", argv[5]);
			return 2;
		}
		udp(&dst, src_port, rate);
	}
	fprintf(stderr, "tacc-guest: unknown transport %s\n", argv[1]);
	return 2;
}
