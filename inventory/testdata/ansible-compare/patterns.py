"""Answer, for many inventories in one Python process, what
`ansible-inventory -i SRC... --list` prints and which hosts
`ansible -i SRC... PATTERN --list-hosts` selects (each ansible start costs
about a second of CPU; gpush's test checks some of the --list answers
against the real ansible-inventory command).

Written for gpush's comparison suite (inventory/ansible_compare_test.go).
Reads one JSON object on stdin:
    {"cases": [{"name": N, "sources": [PATH...], "limits": [P...]}]}
and prints one JSON object:
    {N: {"list": {"out": TEXT, "error": MSG|null, "warnings": [...]},
         "error": MSG|null, "warnings": [...],
         "patterns": {P: {"hosts": [...]|null, "error": MSG|null,
                          "warnings": [...]}},
         "connections": {HOST: {FIELD: {"value": V} | {"error": MSG}}}}}
The patterns asked are all, ungrouped, each group, each host, then the
case's limits. A host's connection is what a play would use: for each field the first of
its variables that is set (Ansible's MAGIC_VARIABLE_MAPPING order, so
ansible_ssh_host before ansible_host), templated with the host's vars as a
task would (Jinja resolved; vault values cannot be decrypted here).
"""

import json
import sys

from ansible import constants as C
from ansible.cli.inventory import InventoryCLI
from ansible.utils.context_objects import GlobalCLIArgs
from ansible.errors import AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.utils.display import Display
from ansible.vars.manager import VariableManager

# Warnings are what ansible prints on stderr; keep them per step instead.
# Display dedupes repeated warnings process-wide, which would hide a
# warning from every case but the first: collect them before that.
_seen = []
# What ansible-inventory would print on stdout, while capturing.
_stdout = None
_display = Display.display


def _warning(self, msg, formatted=False):
    _seen.append(" ".join(str(msg).split()))


def _display_to(self, msg, color=None, stderr=False, screen_only=False, log_only=False, newline=True):
    if _stdout is not None and not stderr and not log_only:
        _stdout.append(msg)
        return
    _display(self, msg, color=color, stderr=True, screen_only=screen_only, log_only=log_only, newline=newline)


Display.warning = _warning
Display.display = _display_to


def take_warnings():
    # Each once, as Display shows them.
    out = list(dict.fromkeys(_seen))
    del _seen[:]
    return out


def inventory_list(sources):
    """ansible-inventory --list, run through its own CLI class."""
    global _stdout
    args = ["ansible-inventory"]
    for src in sources:
        args += ["-i", src]
    args.append("--list")
    res = {"out": None, "error": None, "warnings": []}
    _stdout = []
    code = None
    # The parsed command line is a process-wide singleton: without this,
    # every run would see the first run's -i.
    GlobalCLIArgs._Singleton__instance = None
    try:
        InventoryCLI(args).run()
    except SystemExit as exc:
        code = exc.code
    except AnsibleError as exc:
        res["error"] = " ".join(str(exc).split())
    finally:
        out, _stdout = _stdout, None
    if res["error"] is None and code != 0:
        res["error"] = "ansible-inventory exited %r" % (code,)
    if res["error"] is None:
        res["out"] = "\n".join(out)
    res["warnings"] = take_warnings()
    return res


# gpush's Host fields and the play-context attributes they stand for.
CONN_FIELDS = {
    "address": "remote_addr",
    "port": "port",
    "user": "remote_user",
    "key": "private_key_file",
    "connection": "connection",
}


def connections(loader, inv):
    out = {}
    vm = VariableManager(loader=loader, inventory=inv)
    for host in inv.get_hosts():
        hvars = vm.get_vars(host=host, include_hostvars=False)
        templar = Templar(loader=loader, variables=hvars)
        fields = {}
        for field, attr in CONN_FIELDS.items():
            for name in C.MAGIC_VARIABLE_MAPPING[attr]:
                if name not in hvars:
                    continue
                try:
                    val = templar.template(hvars[name])
                    fields[field] = {"value": val if isinstance(val, (int, float)) else str(val)}
                except Exception as exc:  # what a task would fail with
                    fields[field] = {"error": "%s: %s" % (type(exc).__name__, " ".join(str(exc).split()))}
                break
        out[host.name] = fields
    take_warnings()
    return out


def run_case(case):
    res = {"list": inventory_list(case["sources"]), "error": None, "warnings": [],
           "patterns": {}, "connections": {}}
    loader = DataLoader()
    try:
        inv = InventoryManager(loader=loader, sources=case["sources"])
    except AnsibleError as exc:
        res["error"] = " ".join(str(exc).split())
        res["warnings"] = take_warnings()
        return res
    res["warnings"] = take_warnings()
    patterns = ["all", "ungrouped"] + sorted(inv.groups) + sorted(inv.hosts) + case["limits"]
    for pat in dict.fromkeys(patterns):
        inv.clear_pattern_cache()
        ans = {"hosts": None, "error": None, "warnings": []}
        try:
            # list_hosts is what --list-hosts calls (implicit localhost included).
            ans["hosts"] = [getattr(h, "name", h) for h in inv.list_hosts(pat)]
        except AnsibleError as exc:
            ans["error"] = " ".join(str(exc).split())
        ans["warnings"] = take_warnings()
        res["patterns"][pat] = ans
    res["connections"] = connections(loader, inv)
    return res


def main():
    req = json.load(sys.stdin)
    out = {}
    for case in req["cases"]:
        out[case["name"]] = run_case(case)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
