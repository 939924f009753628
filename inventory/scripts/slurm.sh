#!/bin/sh
# Ansible inventory script (gpush -i, ansible -i): the nodes of Slurm
# partitions, one group per partition, all under the group "slurm".
#
#   SLURM_INVENTORY_PARTITIONS  partitions, comma-separated (default: gpu)
#   SLURM_INVENTORY_STATES      only nodes in these states (sinfo -t), e.g.
#                               idle,mixed,allocated,drain (default: all)
#
# Hosts carry no address: ssh_config, host_vars/ or group_vars/ beside this
# script give it (node names are what Slurm resolves, usually the DNS names).
# A partition with no node is an error: a misspelt name must not silently
# give an empty fleet.
set -eu

case "${1:-}" in
--list) ;;
--host) echo '{}'; exit 0 ;; # every var is in _meta; Ansible may still ask
*) echo "usage: $0 --list | --host NAME" >&2; exit 2 ;;
esac

partitions=${SLURM_INVENTORY_PARTITIONS:-gpu}
states=${SLURM_INVENTORY_STATES:-}
# Names go into JSON unquoted by any tool: allow only what Slurm allows in
# practice, so no escaping is needed and nothing odd reaches ssh.
safe='^[A-Za-z0-9_][A-Za-z0-9_.-]*$'

groups=''
children=''
set -f # node names have brackets: no globbing of unquoted expansions
old_ifs=$IFS
IFS=,
set -- $partitions
IFS=$old_ifs
for part in "$@"; do
	if ! printf '%s\n' "$part" | grep -Eq "$safe"; then
		echo "slurm.sh: partition name \"$part\" has unexpected characters" >&2
		exit 1
	fi
	# sinfo prints one hostlist expression (gpu[01-04,07]) per line, a line
	# per state group; scontrol expands their comma-joined union.
	if [ -n "$states" ]; then
		lists=$(sinfo -h -p "$part" -t "$states" -o %N)
	else
		lists=$(sinfo -h -p "$part" -o %N)
	fi
	hostlist=$(printf '%s\n' "$lists" | grep -v '^[[:space:]]*$' | paste -sd, -) || true
	if [ -z "$hostlist" ]; then
		echo "slurm.sh: partition $part has no nodes${states:+ in states $states} (sinfo -s lists the partitions)" >&2
		exit 1
	fi
	expanded=$(scontrol show hostnames "$hostlist")
	names=$(printf '%s\n' "$expanded" | awk 'NF && !seen[$0]++')
	if [ -z "$names" ]; then
		echo "slurm.sh: scontrol show hostnames $hostlist printed no names" >&2
		exit 1
	fi
	hosts=''
	for n in $names; do
		if ! printf '%s\n' "$n" | grep -Eq "$safe"; then
			echo "slurm.sh: node name \"$n\" in partition $part has unexpected characters" >&2
			exit 1
		fi
		hosts="$hosts${hosts:+, }\"$n\""
	done
	groups="$groups  \"$part\": {\"hosts\": [$hosts], \"vars\": {\"slurm_partition\": \"$part\"}},
"
	children="$children${children:+, }\"$part\""
done

printf '{\n%s  "slurm": {"children": [%s]},\n  "_meta": {"hostvars": {}}\n}\n' "$groups" "$children"
