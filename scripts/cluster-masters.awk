# cluster-masters.awk: reads CLUSTER NODES output and prints the port of
# each master that serves slots and is neither failed, suspected, nor
# without an address, one per line, in the order of their first slot.
# Used by scripts/stack/cluster.sh (cluster_masters) and scripts/stack-env.sh
# (se_cluster_master_ports).
$3 ~ /(^|,)master(,|$)/ && $3 !~ /(^|,)(fail\??|noaddr|handshake)(,|$)/ && NF >= 9 {
    addr = $2; sub(/[@,].*/, "", addr); sub(/.*:/, "", addr)
    first = $9; sub(/^\[/, "", first); sub(/[^0-9].*/, "", first)
    masters[first + 0] = addr
}
END {
    n = 0
    for (f in masters) order[++n] = f + 0
    for (i = 2; i <= n; i++) {          # insertion sort: a handful of masters
        v = order[i]
        for (j = i - 1; j >= 1 && order[j] > v; j--) order[j + 1] = order[j]
        order[j + 1] = v
    }
    for (i = 1; i <= n; i++) print masters[order[i]]
}
