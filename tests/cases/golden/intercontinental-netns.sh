#!/bin/sh
set -e
ip -n lab-router link add name rl-rl-r-c1 type ifb
ip -n lab-router link set dev rl-rl-r-c1 up
tc -n lab-router -batch - <<'EOF'
qdisc add dev rl-r-c1 root handle 52: htb default 0
class add dev rl-r-c1 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-r-c1 parent 52:1 classid 52:10 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev rl-r-c1 parent 52:10 handle fffe: htb default 0
class add dev rl-r-c1 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-r-c1 parent fffe:1 classid fffe:100 htb rate 100mbit ceil 100mbit burst 12500b cburst 12500b quantum 1514 mpu 64
qdisc add dev rl-r-c1 parent fffe:100 handle 100: netem limit 2478 delay 200ms rate 100mbit
filter add dev rl-r-c1 parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev rl-r-c1 parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00002710 0x0000ffff at 20 classid fffe:100
filter add dev rl-r-c1 parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev rl-r-c1 parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev rl-r-c1 parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev rl-r-c1 parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00002710 0x0000ffff at 20 classid 52:10
filter add dev rl-r-c1 parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev rl-r-c1 parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
qdisc add dev rl-r-c1 handle ffff: ingress
filter add dev rl-r-c1 parent ffff: prio 1 handle ::1 protocol all u32 match u32 0x00000000 0x00000000 at 0 action mirred egress redirect dev rl-rl-r-c1
qdisc add dev rl-rl-r-c1 root handle 52: htb default 0
class add dev rl-rl-r-c1 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-rl-r-c1 parent 52:1 classid 52:10 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev rl-rl-r-c1 parent 52:10 handle fffe: htb default 0
class add dev rl-rl-r-c1 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev rl-rl-r-c1 parent fffe:1 classid fffe:100 htb rate 100mbit ceil 100mbit burst 12500b cburst 12500b quantum 1514 mpu 64
qdisc add dev rl-rl-r-c1 parent fffe:100 handle 100: netem limit 2478 delay 200ms rate 100mbit
filter add dev rl-rl-r-c1 parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev rl-rl-r-c1 parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 12 match u32 0x27100000 0xffff0000 at 20 classid fffe:100
filter add dev rl-rl-r-c1 parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev rl-rl-r-c1 parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev rl-rl-r-c1 parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev rl-rl-r-c1 parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 12 match u32 0x27100000 0xffff0000 at 20 classid 52:10
filter add dev rl-rl-r-c1 parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev rl-rl-r-c1 parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
EOF
