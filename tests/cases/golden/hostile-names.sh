#!/bin/sh
set -e
ip -n 'ns$(id)`id`' link add name 'rl-x;to54560d0c' type ifb
ip -n 'ns$(id)`id`' link set dev 'rl-x;to54560d0c' up
tc -n 'ns$(id)`id`' -batch - <<'EOF'
qdisc add dev 'x;touch${IFS}P' root handle 52: htb default 0
class add dev 'x;touch${IFS}P' parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev 'x;touch${IFS}P' parent 52:1 classid 52:10 htb rate 28800bit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev 'x;touch${IFS}P' parent 52:10 handle fffe: htb default 0
class add dev 'x;touch${IFS}P' parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev 'x;touch${IFS}P' parent fffe:1 classid fffe:100 htb rate 28800bit ceil 28800bit burst 4b cburst 4b quantum 1514 mpu 64
qdisc add dev 'x;touch${IFS}P' parent fffe:100 handle 100: bfifo limit 15140
filter add dev 'x;touch${IFS}P' parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev 'x;touch${IFS}P' parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00000050 0x0000ffff at 20 classid fffe:100
filter add dev 'x;touch${IFS}P' parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev 'x;touch${IFS}P' parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev 'x;touch${IFS}P' parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev 'x;touch${IFS}P' parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00000050 0x0000ffff at 20 classid 52:10
filter add dev 'x;touch${IFS}P' parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev 'x;touch${IFS}P' parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
qdisc add dev 'x;touch${IFS}P' handle ffff: ingress
filter add dev 'x;touch${IFS}P' parent ffff: prio 1 handle ::1 protocol all u32 match u32 0x00000000 0x00000000 at 0 action mirred egress redirect dev 'rl-x;to54560d0c'
qdisc add dev 'rl-x;to54560d0c' root handle 52: htb default 0
class add dev 'rl-x;to54560d0c' parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev 'rl-x;to54560d0c' parent 52:1 classid 52:10 htb rate 28800bit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev 'rl-x;to54560d0c' parent 52:10 handle fffe: htb default 0
class add dev 'rl-x;to54560d0c' parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev 'rl-x;to54560d0c' parent fffe:1 classid fffe:100 htb rate 28800bit ceil 28800bit burst 4b cburst 4b quantum 1514 mpu 64
qdisc add dev 'rl-x;to54560d0c' parent fffe:100 handle 100: bfifo limit 15140
filter add dev 'rl-x;to54560d0c' parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev 'rl-x;to54560d0c' parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 12 match u32 0x00500000 0xffff0000 at 20 classid fffe:100
filter add dev 'rl-x;to54560d0c' parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev 'rl-x;to54560d0c' parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev 'rl-x;to54560d0c' parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev 'rl-x;to54560d0c' parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 12 match u32 0x00500000 0xffff0000 at 20 classid 52:10
filter add dev 'rl-x;to54560d0c' parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
filter add dev 'rl-x;to54560d0c' parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 12 link 1:
EOF
