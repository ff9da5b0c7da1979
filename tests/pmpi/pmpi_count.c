/* PMPI interposer for tests (issue 18): counts the bytes the program hands to MPI's
 * point-to-point and all-to-all/allgather calls, per rank, and writes them at MPI_Finalize to
 * $PMPI_COUNT_OUT.<world rank> as "isend <bytes> <calls>\nirecv_posted <bytes> <calls>\n
 * irecv_completed <bytes>\nalltoall <bytes to others>\nallgather <bytes to others>\n
 * allreduce <buffer bytes> <calls>\n...". LD_PRELOAD it under mpirun (-x LD_PRELOAD): MPI's
 * MPI_* entry points are weak aliases of PMPI_*, so these definitions take their place.
 * Completed receive sizes come from the statuses of MPI_Test/MPI_Wait (MPI_Get_count). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t isendBytes, isendCalls, irecvBytes, irecvCalls, recvDone, a2aBytes, agBytes, arBytes, arCalls,
    redBytes, bcastBytes;

/* Receive requests in flight, to count their real size once they complete. */
#define MAXREQ 65536
static MPI_Request recvReqs[MAXREQ];
static int nRecv;

static uint64_t sizeOf(MPI_Datatype t, int count) {
  int s = 0;
  PMPI_Type_size(t, &s);
  return (uint64_t)s * (uint64_t)(count < 0 ? 0 : count);
}

static int othersIn(MPI_Comm c) {
  int n = 1;
  PMPI_Comm_size(c, &n);
  return n - 1;
}

int MPI_Isend(const void* buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  isendBytes += sizeOf(t, count);
  ++isendCalls;
  return PMPI_Isend(buf, count, t, dest, tag, comm, req);
}

int MPI_Irecv(void* buf, int count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Request* req) {
  irecvBytes += sizeOf(t, count);
  ++irecvCalls;
  int rc = PMPI_Irecv(buf, count, t, src, tag, comm, req);
  if (nRecv < MAXREQ) recvReqs[nRecv++] = *req;
  return rc;
}

static void noteCompleted(MPI_Request before, const MPI_Status* st) {
  for (int i = 0; i < nRecv; ++i)
    if (recvReqs[i] == before) {
      int n = 0;
      PMPI_Get_count(st, MPI_BYTE, &n);
      if (n != MPI_UNDEFINED) recvDone += (uint64_t)n;
      recvReqs[i] = recvReqs[--nRecv];
      return;
    }
}

int MPI_Test(MPI_Request* req, int* flag, MPI_Status* st) {
  MPI_Status mine;
  MPI_Request before = *req;
  int rc = PMPI_Test(req, flag, st == MPI_STATUS_IGNORE ? &mine : st);
  if (*flag) noteCompleted(before, st == MPI_STATUS_IGNORE ? &mine : st);
  return rc;
}

int MPI_Wait(MPI_Request* req, MPI_Status* st) {
  MPI_Status mine;
  MPI_Request before = *req;
  int rc = PMPI_Wait(req, st == MPI_STATUS_IGNORE ? &mine : st);
  noteCompleted(before, st == MPI_STATUS_IGNORE ? &mine : st);
  return rc;
}

int MPI_Ialltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm comm,
                  MPI_Request* req) {
  a2aBytes += sizeOf(st, sc) * (uint64_t)othersIn(comm);
  return PMPI_Ialltoall(s, sc, st, r, rc, rt, comm, req);
}

int MPI_Iallgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm comm,
                   MPI_Request* req) {
  agBytes += sizeOf(st, sc) * (uint64_t)othersIn(comm);
  return PMPI_Iallgather(s, sc, st, r, rc, rt, comm, req);
}

int MPI_Iallreduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request* req) {
  arBytes += sizeOf(t, count);
  ++arCalls;
  return PMPI_Iallreduce(s, r, count, t, op, comm, req);
}

int MPI_Ireduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm comm,
                MPI_Request* req) {
  redBytes += sizeOf(t, count);
  return PMPI_Ireduce(s, r, count, t, op, root, comm, req);
}

int MPI_Ibcast(void* b, int count, MPI_Datatype t, int root, MPI_Comm comm, MPI_Request* req) {
  bcastBytes += sizeOf(t, count);
  return PMPI_Ibcast(b, count, t, root, comm, req);
}

int MPI_Finalize(void) {
  const char* out = getenv("PMPI_COUNT_OUT");
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (out) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", out, rank);
    FILE* f = fopen(path, "w");
    if (f) {
      fprintf(f, "isend %llu %llu\n", (unsigned long long)isendBytes, (unsigned long long)isendCalls);
      fprintf(f, "irecv_posted %llu %llu\n", (unsigned long long)irecvBytes, (unsigned long long)irecvCalls);
      fprintf(f, "irecv_completed %llu\n", (unsigned long long)recvDone);
      fprintf(f, "alltoall %llu\nallgather %llu\n", (unsigned long long)a2aBytes, (unsigned long long)agBytes);
      fprintf(f, "allreduce %llu %llu\nreduce %llu\nbcast %llu\n", (unsigned long long)arBytes,
              (unsigned long long)arCalls, (unsigned long long)redBytes, (unsigned long long)bcastBytes);
      fclose(f);
    }
  }
  return PMPI_Finalize();
}
