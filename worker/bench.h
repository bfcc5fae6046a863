/* bench.h — `ringmaster-worker bench`: an allreduce benchmark in nccl-tests' format.
 *
 * worker/main.c dispatches the `bench` subcommand here with argv[0] = "bench". The world comes
 * from mpirun (--backend mpi), from the rendezvous (RINGMASTER_RENDEZVOUS, RINGMASTER_JOB,
 * RINGMASTER_TOKEN, RINGMASTER_WORKER_ID, RINGMASTER_BIND_ADDR, like `train`), or from static
 * flags `--world N --rank R --peers h:p,h:p,...` (tests and bench scripts without a controller).
 * Flags as nccl-tests: -b MINBYTES -e MAXBYTES -f FACTOR -n ITERS(20) -w WARMUP(5) -c CHECK(1),
 * plus --backend ring|mpi|nccl|local, --json FILE, --timeout S, --token T.
 * Returns the process exit status: 0 ok, 1 on a failed collective or any #wrong > 0, 2 on usage. */
#ifndef RM_WORKER_BENCH_H
#define RM_WORKER_BENCH_H

int rm_worker_bench_main(int argc, char **argv);
#endif
