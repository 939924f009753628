"""A CUDA holder that forks after allocating: the child inherits the device files and the
context mappings. Kill the parent and nvidia-smi keeps charging the memory to the dead
parent's pid while the child, which nvidia-smi does not list, keeps it alive.
usage: forked.py GIB; prints "ready <parent>" and "child <child>"."""
import os
import sys
import time
import warnings

import torch

warnings.simplefilter("ignore")
buf = torch.empty(int(float(sys.argv[1]) * (1 << 30)), dtype=torch.uint8, device="cuda")
buf.fill_(1)
torch.cuda.synchronize()
if os.fork() == 0:
    print("child", os.getpid(), flush=True)
else:
    print("ready", os.getpid(), flush=True)
while True:
    time.sleep(3600)
