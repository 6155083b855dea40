#!/bin/sh
set -e
ip link add name rl-veth1a2b3c4 type ifb
ip link set dev rl-veth1a2b3c4 up
tc -batch - <<'EOF'
qdisc add dev veth1a2b3c4 handle ffff: ingress
filter add dev veth1a2b3c4 parent ffff: prio 1 handle ::1 protocol all u32 match u32 0x00000000 0x00000000 at 0 action mirred egress redirect dev rl-veth1a2b3c4
qdisc add dev rl-veth1a2b3c4 root handle 52: stab overhead -46 linklayer ethernet htb default 0
class add dev rl-veth1a2b3c4 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev rl-veth1a2b3c4 parent 52:1 classid 52:10 htb rate 53728bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev rl-veth1a2b3c4 parent 52:10 handle fffe: htb default 0
class add dev rl-veth1a2b3c4 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev rl-veth1a2b3c4 parent fffe:1 classid fffe:100 htb rate 26864bit ceil 26864bit burst 4b cburst 4b quantum 1468
qdisc add dev rl-veth1a2b3c4 parent fffe:100 handle 100: bfifo limit 16384
class add dev rl-veth1a2b3c4 parent fffe:1 classid fffe:101 htb rate 26864bit ceil 26864bit burst 4b cburst 4b quantum 1468
qdisc add dev rl-veth1a2b3c4 parent fffe:101 handle 101: bfifo limit 16384
filter add dev rl-veth1a2b3c4 parent fffe: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev rl-veth1a2b3c4 parent fffe: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc612f003 0xffffffff at 16 classid fffe:100
filter add dev rl-veth1a2b3c4 parent fffe: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 16 link 3:
filter add dev rl-veth1a2b3c4 parent fffe: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev rl-veth1a2b3c4 parent fffe: prio 4 handle 4:3:1 protocol ipv6 u32 ht 4:3: match u32 0x20010db8 0xffffffff at 24 match u32 0x00000000 0xffffffff at 28 match u32 0x00000000 0xffffffff at 32 match u32 0x00000003 0xffffffff at 36 classid fffe:101
filter add dev rl-veth1a2b3c4 parent fffe: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 36 link 4:
filter add dev rl-veth1a2b3c4 parent 52: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev rl-veth1a2b3c4 parent 52: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc612f003 0xffffffff at 16 classid 52:10
filter add dev rl-veth1a2b3c4 parent 52: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 16 link 3:
filter add dev rl-veth1a2b3c4 parent 52: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev rl-veth1a2b3c4 parent 52: prio 4 handle 4:3:1 protocol ipv6 u32 ht 4:3: match u32 0x20010db8 0xffffffff at 24 match u32 0x00000000 0xffffffff at 28 match u32 0x00000000 0xffffffff at 32 match u32 0x00000003 0xffffffff at 36 classid 52:10
filter add dev rl-veth1a2b3c4 parent 52: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 36 link 4:
qdisc add dev veth1a2b3c4 root handle 52: stab overhead -46 linklayer ethernet htb default 0
class add dev veth1a2b3c4 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev veth1a2b3c4 parent 52:1 classid 52:10 htb rate 53728bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev veth1a2b3c4 parent 52:10 handle fffe: htb default 0
class add dev veth1a2b3c4 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev veth1a2b3c4 parent fffe:1 classid fffe:100 htb rate 26864bit ceil 26864bit burst 4b cburst 4b quantum 1468
qdisc add dev veth1a2b3c4 parent fffe:100 handle 100: bfifo limit 3250
class add dev veth1a2b3c4 parent fffe:1 classid fffe:101 htb rate 26864bit ceil 26864bit burst 4b cburst 4b quantum 1468
qdisc add dev veth1a2b3c4 parent fffe:101 handle 101: bfifo limit 3250
filter add dev veth1a2b3c4 parent fffe: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev veth1a2b3c4 parent fffe: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc612f003 0xffffffff at 12 classid fffe:100
filter add dev veth1a2b3c4 parent fffe: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 12 link 3:
filter add dev veth1a2b3c4 parent fffe: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev veth1a2b3c4 parent fffe: prio 4 handle 4:3:1 protocol ipv6 u32 ht 4:3: match u32 0x20010db8 0xffffffff at 8 match u32 0x00000000 0xffffffff at 12 match u32 0x00000000 0xffffffff at 16 match u32 0x00000003 0xffffffff at 20 classid fffe:101
filter add dev veth1a2b3c4 parent fffe: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 20 link 4:
filter add dev veth1a2b3c4 parent 52: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev veth1a2b3c4 parent 52: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc612f003 0xffffffff at 12 classid 52:10
filter add dev veth1a2b3c4 parent 52: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 12 link 3:
filter add dev veth1a2b3c4 parent 52: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev veth1a2b3c4 parent 52: prio 4 handle 4:3:1 protocol ipv6 u32 ht 4:3: match u32 0x20010db8 0xffffffff at 8 match u32 0x00000000 0xffffffff at 12 match u32 0x00000000 0xffffffff at 16 match u32 0x00000003 0xffffffff at 20 classid 52:10
filter add dev veth1a2b3c4 parent 52: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 20 link 4:
EOF
