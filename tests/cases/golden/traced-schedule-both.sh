#!/bin/sh
set -e
ip link add name rl-veth0 type ifb
ip link set dev rl-veth0 up
tc -batch - <<'EOF'
qdisc add dev veth0 root handle 52: htb default 0
class add dev veth0 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev veth0 parent 52:1 classid 52:10 htb rate 440kbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev veth0 parent 52:10 handle fffe: htb default 0
class add dev veth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev veth0 parent fffe:1 classid fffe:100 htb rate 220kbit ceil 220kbit burst 28b cburst 28b quantum 1514 mpu 64
qdisc add dev veth0 parent fffe:100 handle 100: tbf rate 10gbit burst 1514b limit 30280
class add dev veth0 parent fffe:1 classid fffe:101 htb rate 220kbit ceil 220kbit burst 28b cburst 28b quantum 1514 mpu 64
qdisc add dev veth0 parent fffe:101 handle 101: tbf rate 10gbit burst 1514b limit 30280
filter add dev veth0 parent fffe: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev veth0 parent fffe: prio 3 handle 3:2:1 protocol ip u32 ht 3:2: match u32 0xc6120102 0xffffffff at 16 classid fffe:100
filter add dev veth0 parent fffe: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 16 link 3:
filter add dev veth0 parent fffe: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev veth0 parent fffe: prio 4 handle 4:2:1 protocol ipv6 u32 ht 4:2: match u32 0x20010db8 0xffffffff at 24 match u32 0x00010000 0xffffffff at 28 match u32 0x00000000 0xffffffff at 32 match u32 0x00000002 0xffffffff at 36 classid fffe:101
filter add dev veth0 parent fffe: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 36 link 4:
filter add dev veth0 parent 52: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev veth0 parent 52: prio 3 handle 3:2:1 protocol ip u32 ht 3:2: match u32 0xc6120102 0xffffffff at 16 classid 52:10
filter add dev veth0 parent 52: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 16 link 3:
filter add dev veth0 parent 52: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev veth0 parent 52: prio 4 handle 4:2:1 protocol ipv6 u32 ht 4:2: match u32 0x20010db8 0xffffffff at 24 match u32 0x00010000 0xffffffff at 28 match u32 0x00000000 0xffffffff at 32 match u32 0x00000002 0xffffffff at 36 classid 52:10
filter add dev veth0 parent 52: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 36 link 4:
qdisc add dev veth0 handle ffff: ingress
filter add dev veth0 parent ffff: prio 1 handle ::1 protocol all u32 match u32 0x00000000 0x00000000 at 0 action mirred egress redirect dev rl-veth0
qdisc add dev rl-veth0 root handle 52: htb default 0
class add dev rl-veth0 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-veth0 parent 52:1 classid 52:10 htb rate 440kbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev rl-veth0 parent 52:10 handle fffe: htb default 0
class add dev rl-veth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-veth0 parent fffe:1 classid fffe:100 htb rate 220kbit ceil 220kbit burst 28b cburst 28b quantum 1514 mpu 64
qdisc add dev rl-veth0 parent fffe:100 handle 100: tbf rate 10gbit burst 1514b limit 30280
class add dev rl-veth0 parent fffe:1 classid fffe:101 htb rate 220kbit ceil 220kbit burst 28b cburst 28b quantum 1514 mpu 64
qdisc add dev rl-veth0 parent fffe:101 handle 101: tbf rate 10gbit burst 1514b limit 30280
filter add dev rl-veth0 parent fffe: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev rl-veth0 parent fffe: prio 3 handle 3:2:1 protocol ip u32 ht 3:2: match u32 0xc6120102 0xffffffff at 12 classid fffe:100
filter add dev rl-veth0 parent fffe: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 12 link 3:
filter add dev rl-veth0 parent fffe: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev rl-veth0 parent fffe: prio 4 handle 4:2:1 protocol ipv6 u32 ht 4:2: match u32 0x20010db8 0xffffffff at 8 match u32 0x00010000 0xffffffff at 12 match u32 0x00000000 0xffffffff at 16 match u32 0x00000002 0xffffffff at 20 classid fffe:101
filter add dev rl-veth0 parent fffe: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 20 link 4:
filter add dev rl-veth0 parent 52: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev rl-veth0 parent 52: prio 3 handle 3:2:1 protocol ip u32 ht 3:2: match u32 0xc6120102 0xffffffff at 12 classid 52:10
filter add dev rl-veth0 parent 52: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 12 link 3:
filter add dev rl-veth0 parent 52: prio 4 handle 4: protocol ipv6 u32 divisor 256
filter add dev rl-veth0 parent 52: prio 4 handle 4:2:1 protocol ipv6 u32 ht 4:2: match u32 0x20010db8 0xffffffff at 8 match u32 0x00010000 0xffffffff at 12 match u32 0x00000000 0xffffffff at 16 match u32 0x00000002 0xffffffff at 20 classid 52:10
filter add dev rl-veth0 parent 52: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 20 link 4:
EOF
