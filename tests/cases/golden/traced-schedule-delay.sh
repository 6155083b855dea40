#!/bin/sh
set -e
ip link add name rl-veth0 type ifb
ip link set dev rl-veth0 up
tc -batch - <<'EOF'
qdisc add dev veth0 root handle 52: htb default 0
class add dev veth0 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev veth0 parent 52:1 classid 52:10 htb rate 2690909bit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev veth0 parent 52:10 handle fffe: htb default 0
class add dev veth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev veth0 parent fffe:1 classid fffe:100 htb rate 2690909bit ceil 2690909bit burst 337b cburst 337b quantum 1514 mpu 64
qdisc add dev veth0 parent fffe:100 handle 100: tbf rate 10gbit burst 1514b limit 67273
qdisc add dev veth0 parent 100:1 handle 101: netem limit 79 rate 100mbit
filter add dev veth0 parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev veth0 parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x000007d0 0x0000ffff at 20 classid fffe:100
filter add dev veth0 parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev veth0 parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev veth0 parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev veth0 parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x000007d0 0x0000ffff at 20 classid 52:10
filter add dev veth0 parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev veth0 parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
qdisc add dev veth0 handle ffff: ingress
filter add dev veth0 parent ffff: prio 1 handle ::1 protocol all u32 match u32 0x00000000 0x00000000 at 0 action mirred egress redirect dev rl-veth0
qdisc add dev rl-veth0 root handle 52: htb default 0
class add dev rl-veth0 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-veth0 parent 52:1 classid 52:10 htb rate 782545bit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev rl-veth0 parent 52:10 handle fffe: htb default 0
class add dev rl-veth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-veth0 parent fffe:1 classid fffe:100 htb rate 782545bit ceil 782545bit burst 98b cburst 98b quantum 1514 mpu 64
qdisc add dev rl-veth0 parent fffe:100 handle 100: tbf rate 10gbit burst 1514b limit 19564
qdisc add dev rl-veth0 parent 100:1 handle 101: netem limit 23 rate 100mbit
filter add dev rl-veth0 parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev rl-veth0 parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 12 match u32 0x07d00000 0xffff0000 at 20 classid fffe:100
filter add dev rl-veth0 parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev rl-veth0 parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev rl-veth0 parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev rl-veth0 parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 12 match u32 0x07d00000 0xffff0000 at 20 classid 52:10
filter add dev rl-veth0 parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev rl-veth0 parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
EOF
