/*
 * mpipingpong: two MPI ranks exchange messages of sizes from one byte to 4 MiB (eager and
 * rendezvous protocols both), each filled with a pattern of its size, round and sender that
 * the receiver checks byte by byte, then agree on a sum with MPI_Allreduce. Rank 0 prints
 * "mpipingpong: ok" and the bytes moved when every check held; any mismatch exits 1 naming
 * the first bad byte.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(size_t size, int round, int sender, size_t i)
{
	return (unsigned char)(i * 7 + size * 13 + round * 31 + sender * 101);
}

static int check(const unsigned char *buf, size_t size, int round, int sender)
{
	size_t i;

	for (i = 0; i < size; i++) {
		if (buf[i] != pattern(size, round, sender, i)) {
			fprintf(stderr,
				"mpipingpong: %zu-byte message %d from rank %d: byte %zu is 0x%02x, want 0x%02x\n",
				size, round, sender, i, buf[i],
				pattern(size, round, sender, i));
			return 0;
		}
	}
	return 1;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 1, 64, 4096, 65536, 1 << 20, 4 << 20 };
	const int rounds = 10;
	unsigned char *sbuf, *rbuf;
	int rank, nranks, peer, r;
	size_t s, i, moved = 0;
	long mine, sum;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (nranks != 2) {
		if (rank == 0)
			fprintf(stderr, "mpipingpong: needs 2 ranks, has %d\n", nranks);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	peer = 1 - rank;
	sbuf = malloc(4 << 20);
	rbuf = malloc(4 << 20);
	if (!sbuf || !rbuf)
		MPI_Abort(MPI_COMM_WORLD, 2);

	for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t size = sizes[s];

		for (r = 0; r < rounds; r++) {
			for (i = 0; i < size; i++)
				sbuf[i] = pattern(size, r, rank, i);
			memset(rbuf, 0, size);
			if (rank == 0) {
				MPI_Send(sbuf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD);
				MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(rbuf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				MPI_Send(sbuf, (int)size, MPI_BYTE, peer, r, MPI_COMM_WORLD);
			}
			if (!check(rbuf, size, r, peer))
				MPI_Abort(MPI_COMM_WORLD, 1);
			moved += 2 * size;
		}
	}

	mine = rank + 1;
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != 3) {
		fprintf(stderr, "mpipingpong: rank %d: allreduce gave %ld, want 3\n", rank, sum);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	if (rank == 0)
		printf("mpipingpong: ok, %zu bytes both ways\n", moved);
	free(sbuf);
	free(rbuf);
	MPI_Finalize();
	return 0;
}
