#!/usr/bin/python3
"""free-port.py [N]: print N (default 1) loopback TCP ports, one per line, each free when checked and
all distinct, chosen at random BELOW the kernel's ephemeral range (net.ipv4.ip_local_port_range).

A port found by binding port 0 and closing is an ephemeral one: the kernel may hand the very same
port to the next process that binds port 0 (kubesim, a worker's metrics listener) before the test
uses it. That happened in CI: the operator's rendezvous port was the port kubesim had been given.
The kernel never gives out a port below its ephemeral range to a bind of port 0, so a port from
there can only be taken by a process that asks for it by number."""
import random
import socket
import sys


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    lo, hi = 10000, ephemeral_low()
    if hi - lo < 1000:
        lo = 1024
    held, ports = [], []
    for _ in range(200 * n):
        if len(ports) == n:
            break
        p = random.randrange(lo, hi)
        if p in ports:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            s.close()
            continue
        held.append(s)   # held until all are chosen, so the N ports are distinct and free together
        ports.append(p)
    for s in held:
        s.close()
    if len(ports) < n:
        sys.exit("free-port.py: no free port below %d" % hi)
    print("\n".join(map(str, ports)))


if __name__ == "__main__":
    main()
