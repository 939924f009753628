"""How a CUDA context differs from an NVML client on the host (run on the H200):
per process, the count of fds per NVIDIA device and the NVIDIA device mappings in /proc/PID/maps,
for a torch holder, its forked child (after the parent died) and a pynvml monitor."""
import collections, os, signal, subprocess, sys, time

def describe(tag, pid):
    fds = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            l = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if l.startswith("/dev/nvidia"):
            fds[l] += 1
    maps = collections.Counter()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5].startswith("/dev/nvidia"):
                maps[parts[5]] += 1
    print(f"{tag} pid {pid}: fds {dict(fds)}; maps {dict(maps)}", flush=True)

mon = subprocess.Popen([sys.executable, "-c", "import pynvml,time,os\npynvml.nvmlInit()\nh=pynvml.nvmlDeviceGetHandleByIndex(0)\n"
    "pynvml.nvmlDeviceGetMemoryInfo(h)\npynvml.nvmlDeviceGetComputeRunningProcesses(h)\nprint('ready',os.getpid(),flush=True)\ntime.sleep(3600)\n"], stdout=subprocess.PIPE, text=True)
mpid = int(mon.stdout.readline().split()[1])
code = ("import os,sys,time,torch\n"
        "b=torch.empty(1<<30,dtype=torch.uint8,device='cuda'); b.fill_(1); torch.cuda.synchronize()\n"
        "pid=os.fork()\n"
        "if pid==0:\n    print('child',os.getpid(),flush=True); time.sleep(3600)\n"
        "print('ready',os.getpid(),flush=True); time.sleep(3600)\n")
p = subprocess.Popen([sys.executable, "-W", "ignore", "-c", code], stdout=subprocess.PIPE, text=True)
ls = dict(p.stdout.readline().split() for _ in range(2))
parent, child = int(ls["ready"]), int(ls["child"])
time.sleep(0.3)
describe("nvml monitor", mpid)
describe("torch holder", parent)
describe("its forked child", child)
os.kill(parent, signal.SIGKILL); p.wait(); time.sleep(0.3)
describe("forked child after the parent died", child)
smi = subprocess.Popen(["nvidia-smi", "-lms", "200", "--query-gpu=memory.used", "--format=csv,noheader"], stdout=subprocess.DEVNULL)
time.sleep(1.0)
describe("nvidia-smi -lms", smi.pid)
for x in (smi.pid, child, mpid):
    os.kill(x, signal.SIGKILL)
