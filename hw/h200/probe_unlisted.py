"""How nvidia-smi's memory.used compares with the compute apps' used_memory
on the H200: with one and two live holders, and, every 10 ms after one is
SIGKILLed, whether the driver unlists the process before its memory is
back (a window where memory.used counts memory no listed process holds)."""
import os, signal, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))


def smi(q):
    out = subprocess.run(["nvidia-smi", q, "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    return [l.split(", ") for l in out.strip().splitlines() if l.strip()]


def used():
    return int(smi("--query-gpu=memory.used")[0][0])


def listed():
    return {int(r[0]): int(r[1]) for r in smi("--query-compute-apps=pid,used_memory")}


def hold(gib):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "hold.py"), "plain", str(gib)], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    return p, int(line[1])


print("idle: used", used(), "listed", listed(), flush=True)
a_p, a = hold(2)
print("one holder: used", used(), "listed", listed(), flush=True)
b_p, b = hold(4)
time.sleep(0.5)
print("two holders: used", used(), "listed", listed(), flush=True)
t0 = time.monotonic()
os.kill(b, signal.SIGKILL)
seen_unlisted = None
for _ in range(60):
    u, l = used(), listed()
    t = (time.monotonic() - t0) * 1000
    print(f"{t:6.0f} ms used {u} listed {l} unaccounted {u - sum(l.values())}", flush=True)
    if b not in l and seen_unlisted is None:
        seen_unlisted = t
    if b not in l and u - sum(l.values()) < 64:
        break
for p in (a_p, b_p):
    p.kill()
    p.wait()
time.sleep(0.5)
print("after: used", used(), "listed", listed(), flush=True)
