"""What the H200 check scripts share: a PASS/FAIL log whose failures decide the exit status."""

failures = []


def log(*a):
    print(*a, flush=True)


def check(cond, what):
    log(("PASS " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
