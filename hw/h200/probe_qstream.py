"""One-process probe (the lent H200: python3 hw/h200/probe_qstream.py): can one
long-running nvidia-smi answer both the GPU memory and the compute-apps listing of a free, and what
does each way of asking cost the host? For every form: the CPU (user+sys from wait4) of a one-shot
run, and of a stream over 1 s (samples counted, the gap between them, whether each sample reaches a
pipe as it is taken); then, for the `-q -d MEMORY,PIDS` stream (-x cannot be combined with -d), how soon after a SIGKILL its
samples show the release against an NVML poll at 1 ms. A torch holder (hold.py, 10 GiB) runs
throughout so that the listing is not empty."""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pynvml

SMI = "nvidia-smi"
QGPU = ["--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"]
QAPPS = ["--query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory", "--format=csv,noheader,nounits"]
QTXT = ["-q", "-d", "MEMORY,PIDS"]


def run_cpu(argv, seconds=None):
    """Runs argv; returns (cpu ms, wall ms, stdout chunks as (t, bytes))."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE)
    chunks = []

    def rd():
        while True:
            b = os.read(p.stdout.fileno(), 65536)
            if not b:
                return
            chunks.append((time.monotonic() - t0, b))

    th = threading.Thread(target=rd, daemon=True)
    th.start()
    if seconds:
        time.sleep(seconds)
        os.kill(p.pid, signal.SIGTERM)  # not p.send_signal: its poll() would reap p first
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    th.join(2)
    return 1000 * (ru.ru_utime + ru.ru_stime), 1000 * (time.monotonic() - t0), chunks


def main():
    try:
        probe()
    finally:
        for p in HOLDERS:
            p.kill()


HOLDERS = []


def probe():
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    used = lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used >> 20
    hold = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hold.py")
    hp = subprocess.Popen([sys.executable, hold, "plain", "10"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    HOLDERS.append(hp)
    ready = hp.stdout.readline().strip()
    if not ready.startswith("ready"):
        sys.exit("hold.py did not start: no holder, nothing to list")
    print(ready, "used", used(), "MiB")
    forms = {"query-gpu": QGPU, "query-compute-apps": QAPPS, "q MEMORY,PIDS": QTXT}
    for name, args in forms.items():
        cpus = [run_cpu([SMI] + args)[0] for _ in range(3)]
        print(f"one-shot {name}: cpu {' '.join('%.1f' % c for c in cpus)} ms")
    _, _, ch = run_cpu([SMI] + QTXT)
    doc = b"".join(b for _, b in ch).decode()
    print("one-shot q MEMORY,PIDS:", len(doc), "bytes")
    print(doc)
    for name, args in forms.items():
        for lms in ("2", "10"):
            cpu, wall, ch = run_cpu([SMI] + args + ["-lms", lms], seconds=1.0)
            data = b"".join(b for _, b in ch)
            if args == QTXT:
                n = data.count(b"==============NVSMI LOG==============")
            else:
                n = data.count(b"\n")
            print(f"stream {name} -lms {lms}: cpu {cpu:.1f} ms over {wall:.0f} ms, {n} samples, "
                  f"{len(ch)} reads, {len(data)} bytes, first read at {1000 * ch[0][0] if ch else -1:.1f} ms")
    # Does the -q stream show a release as soon as NVML does?
    s = subprocess.Popen([SMI] + QTXT + ["-lms", "2"], stdout=subprocess.PIPE)
    seen = []
    buf = [b""]

    def rd():
        while True:
            b = os.read(s.stdout.fileno(), 65536)
            if not b:
                return
            buf[0] += b
            mark = b"==============NVSMI LOG=============="
            while buf[0].count(mark) >= 2:
                i = buf[0].index(mark, buf[0].index(mark) + 1)
                d, buf[0] = buf[0][:i], buf[0][i:]
                m = re.search(rb"FB Memory Usage.*?Used\s+:\s+(\d+) MiB", d, re.S)
                seen.append((time.monotonic(), int(m.group(1)) if m else -1, d.count(b"Process ID")))

    threading.Thread(target=rd, daemon=True).start()
    time.sleep(0.5)
    t0 = time.monotonic()
    os.kill(hp.pid, signal.SIGKILL)
    rel = None
    while time.monotonic() - t0 < 5:
        if used() <= 64:
            rel = time.monotonic()
            break
        time.sleep(0.001)
    time.sleep(0.3)
    st = next(((t, n) for t, u, n in seen if t > t0 and 0 <= u <= 64), None)
    gone = next((t for t, u, n in seen if t > t0 and n == 0), None)
    print(f"release {1000 * (rel - t0):.1f} ms; -q stream saw used<=64 at {1000 * (st[0] - t0):.1f} ms "
          f"(listing then {st[1]}), listing empty at {1000 * ((gone or t0) - t0):.1f} ms")
    gaps = sorted((b[0] - a[0]) * 1000 for a, b in zip(seen[3:], seen[4:]))
    print("-q stream sample gap: median %.1f ms, max %.1f ms" % (gaps[len(gaps) // 2], gaps[-1]))
    s.kill()
    hp.wait()


if __name__ == "__main__":
    main()
