#!/bin/sh
set -e
tc -batch - <<'EOF'
qdisc add dev eth0 root handle 52: htb default 0
class add dev eth0 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev eth0 parent 52:1 classid 52:10 htb rate 20mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
qdisc add dev eth0 parent 52:10 handle fffe: htb default 0
class add dev eth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
class add dev eth0 parent fffe:1 classid fffe:100 htb rate 20mbit ceil 100mbit burst 2500b cburst 2500b quantum 1514 mpu 64
qdisc add dev eth0 parent fffe:100 handle 100: netem limit 348 delay 10ms slot distribution pareto 5ms 2ms packets 32 bytes 65536 rate 20mbit
filter add dev eth0 parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev eth0 parent fffe: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00000050 0x0000ffff at 20 classid fffe:100
filter add dev eth0 parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev eth0 parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev eth0 parent 52: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev eth0 parent 52: prio 1 handle 1:2:1 protocol ip u32 ht 1:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00000050 0x0000ffff at 20 classid 52:10
filter add dev eth0 parent 52: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
filter add dev eth0 parent 52: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 1:
EOF
