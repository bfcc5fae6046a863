#!/usr/bin/python3
"""launch.py — a minimal torchrun stand-in (Debian's torch 1.13 `torch.distributed.run` crashes on
this Python): starts N copies of a script with the env torchrun gives its workers (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, OMP_NUM_THREADS=1 as torchrun sets by
default for nproc_per_node > 1), waits for all, and exits non-zero if any failed.
Usage: launch.py --nproc N SCRIPT [ARGS...]"""
import os
import socket
import subprocess
import sys


def main():
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--nproc":
        sys.exit(__doc__)
    n = int(args[1])
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(n), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n))
        env.setdefault("OMP_NUM_THREADS", "1")
        procs.append(subprocess.Popen([sys.executable] + args[2:], env=env))
    rc = 0
    for p in procs:
        rc = rc or p.wait()
    sys.exit(rc)


if __name__ == "__main__":
    main()
