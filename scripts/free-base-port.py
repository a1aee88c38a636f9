#!/usr/bin/env python3
"""Prints a BASE_PORT for scripts/cluster.sh whose eighteen ports (node i:
BASE_PORT+10*i .. +5, i = 1..3) were all free for TCP and UDP on 127.0.0.1
a moment ago; exits 1 if none is found in 12000-18900."""
import random
import socket
import sys

for _ in range(200):
    base = random.randrange(12000, 18901, 10)
    held, ok = [], True
    for port in (base + 10 * i + k for i in (1, 2, 3) for k in range(6)):
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
            s = socket.socket(socket.AF_INET, kind)
            held.append(s)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                ok = False
    for s in held:
        s.close()
    if ok:
        print(base)
        sys.exit(0)
sys.exit(1)
