#!/bin/sh
set -e
tc -batch - <<'EOF'
qdisc add dev eth0 handle ffff: ingress
filter add dev eth0 parent ffff: prio 2 handle 2: protocol ipv6 u32 divisor 256
filter add dev eth0 parent ffff: prio 2 handle 2:2:1 protocol ipv6 u32 ht 2:2: match u32 0x20010db8 0xffffffff at 8 match u32 0x00000000 0xffffffff at 12 match u32 0x00000000 0xffffffff at 16 match u32 0x00000002 0xffffffff at 20 match u32 0x13880000 0xffff0000 at 40 classid ffff:1 action police rate 1mbit burst 625000 mtu 1514 mpu 64 overhead 14 conform-exceed drop/ok
filter add dev eth0 parent ffff: prio 2 handle ::1 protocol ipv6 u32 match u32 0x00000600 0x0000ff00 at 4 hashkey mask 0x000000ff at 20 link 2:
filter add dev eth0 parent ffff: prio 2 handle ::2 protocol ipv6 u32 match u32 0x00001100 0x0000ff00 at 4 hashkey mask 0x000000ff at 20 link 2:
EOF
