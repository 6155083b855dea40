#!/bin/sh
set -e
tc -batch - <<'EOF'
qdisc add dev veth1a2b3c4 handle ffff: ingress
filter add dev veth1a2b3c4 parent ffff: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev veth1a2b3c4 parent ffff: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc612f003 0xffffffff at 16 classid ffff:1 action police index 2067791872 rate 1mbit burst 625000 mtu 1514 mpu 64 overhead 14 conform-exceed drop/ok
filter add dev veth1a2b3c4 parent ffff: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 16 link 3:
qdisc add dev veth1a2b3c4 root handle 52: htb default 0
class add dev veth1a2b3c4 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
filter add dev veth1a2b3c4 parent 52: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev veth1a2b3c4 parent 52: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc612f003 0xffffffff at 12 classid 52:1 action police index 2067922944 rate 1mbit burst 625000 mtu 1514 mpu 64 conform-exceed drop/ok
filter add dev veth1a2b3c4 parent 52: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 12 link 3:
EOF
