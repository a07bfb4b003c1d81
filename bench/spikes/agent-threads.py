#!/usr/bin/env python3
"""CPU of every ios-agent (and pcmd) process by thread name over a window: per-process mean %."""
import os, sys, time, collections
def snap():
    out = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit(): continue
        try:
            comm = open(f'/proc/{pid}/comm').read().strip()
        except OSError: continue
        if comm not in ('ios-agent', 'pcmd', 'peer-server'): continue
        try: tids = os.listdir(f'/proc/{pid}/task')
        except OSError: continue
        for tid in tids:
            try:
                s = open(f'/proc/{pid}/task/{tid}/stat').read()
            except OSError: continue
            name = s[s.index('(')+1:s.rindex(')')]
            f = s[s.rindex(')')+2:].split()
            out[(comm, pid, tid)] = (name, int(f[11]) + int(f[12]))
    return out
window = float(sys.argv[1]) if len(sys.argv) > 1 else 20
a = snap(); t0 = time.time(); time.sleep(window); b = snap(); dt = time.time() - t0
hz = os.sysconf('SC_CLK_TCK')
by = collections.defaultdict(float); procs = collections.defaultdict(set)
for k, (name, ticks) in b.items():
    if k in a:
        by[(k[0], name)] += (ticks - a[k][1]) / hz
        procs[k[0]].add(k[1])
for (comm, name), cpu in sorted(by.items(), key=lambda x: -x[1]):
    n = len(procs[comm])
    print(f'{comm:12} {name:28} {100*cpu/dt/n:7.3f} % of a core per process  ({n} processes)')
