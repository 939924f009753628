"""What the H200 check scripts share: a PASS/FAIL log whose failures decide the exit status, and
the process and GPU readings the checks take."""
import subprocess

failures = []


def log(*a):
    print(*a, flush=True)


def check(cond, what):
    log(("PASS " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def alive(pid):
    """pid runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] not in "ZX"
    except OSError:
        return False


def used():
    """GPU 0's memory.used in MiB, as nvidia-smi reads it."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.splitlines()[0])
