#!/usr/bin/env python3
"""Ansible inventory script (gpush -i, ansible -i): Kubernetes nodes with GPUs.

Runs `kubectl get nodes -l SELECTOR -o json` and prints every node as a host
of the group k8s_gpu, with ansible_host set to its first InternalIP (the
kubelet lists the primary address family first), and a group per GPU model
(gpu_NVIDIA_H200, from the GPU feature discovery label nvidia.com/gpu.product).

Environment:
  K8S_GPU_SELECTOR  label selector (default: nvidia.com/gpu.present=true)
  K8S_GPU_CONTEXT   kubeconfig context (default: kubectl's current one)
  K8S_GPU_GROUP     name of the group of all nodes (default: k8s_gpu)

Host vars: k8s_node, k8s_gpu_count (capacity nvidia.com/gpu), k8s_gpu_product,
k8s_ready, k8s_unschedulable (cordoned nodes are listed: freeing their GPUs
is often why they were cordoned).
"""

import json
import re
import subprocess
import sys
import os

SELECTOR = os.environ.get("K8S_GPU_SELECTOR", "nvidia.com/gpu.present=true")
CONTEXT = os.environ.get("K8S_GPU_CONTEXT", "")
GROUP = os.environ.get("K8S_GPU_GROUP", "k8s_gpu")


def fail(msg):
    print("k8s_gpu.py: " + msg, file=sys.stderr)
    sys.exit(1)


def get_nodes():
    cmd = ["kubectl"]
    if CONTEXT:
        cmd += ["--context", CONTEXT]
    cmd += ["get", "nodes", "-l", SELECTOR, "-o", "json"]
    try:
        # kubectl's stderr goes straight to ours, where gpush quotes it.
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, check=False)
    except OSError as e:
        fail("cannot run kubectl: %s" % e)
    if out.returncode != 0:
        fail("%s exited with status %d" % (" ".join(cmd), out.returncode))
    try:
        doc = json.loads(out.stdout)
    except ValueError as e:
        fail("kubectl printed no JSON: %s" % e)
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        fail("kubectl's JSON has no items list")
    return items


def group_name(text):
    # Ansible warns about group names that are not Python identifiers.
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def inventory(nodes):
    groups = {GROUP: {"hosts": []}}
    hostvars = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        name = meta.get("name")
        if not name:
            fail("a node without metadata.name")
        addrs = [a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"]
        if not addrs or not addrs[0]:
            # Dialling the node name instead could reach another machine.
            fail("node %s has no InternalIP address" % name)
        labels = meta.get("labels") or {}
        hv = {"ansible_host": addrs[0], "k8s_node": name}
        count = (status.get("capacity") or {}).get("nvidia.com/gpu")
        if count is not None:
            try:
                hv["k8s_gpu_count"] = int(count)
            except ValueError:
                hv["k8s_gpu_count"] = count
        product = labels.get("nvidia.com/gpu.product")
        if product:
            hv["k8s_gpu_product"] = product
            groups.setdefault("gpu_" + group_name(product), {"hosts": []})["hosts"].append(name)
        ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
        hv["k8s_ready"] = bool(ready) and ready[0].get("status") == "True"
        hv["k8s_unschedulable"] = bool((node.get("spec") or {}).get("unschedulable"))
        groups[GROUP]["hosts"].append(name)
        hostvars[name] = hv
    groups["_meta"] = {"hostvars": hostvars}
    return groups


def main(argv):
    if len(argv) == 2 and argv[1] == "--list":
        # Insertion order: the group of all nodes first, so hosts keep kubectl's order.
        print(json.dumps(inventory(get_nodes()), indent=2))
    elif len(argv) == 3 and argv[1] == "--host":
        print(json.dumps(inventory(get_nodes())["_meta"]["hostvars"].get(argv[2], {})))
    else:
        print("usage: %s --list | --host NAME" % argv[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
