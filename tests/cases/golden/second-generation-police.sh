#!/bin/sh
set -e
tc -batch - <<'EOF'
qdisc add dev eth0 root handle 52: htb default 0
class add dev eth0 parent 52: classid 52:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1514 mpu 64
filter add dev eth0 parent 52: prio 1 handle 401: protocol ip u32 divisor 256
filter add dev eth0 parent 52: prio 1 handle 401:2:1 protocol ip u32 ht 401:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00001388 0x0000ffff at 20 classid 52:1 action police index 3867672576 rate 28800bit burst 18000 mtu 1514 mpu 64 conform-exceed drop/ok
filter add dev eth0 parent 52: prio 1 handle 401:2:2 protocol ip u32 ht 401:2: match u32 0xc6120102 0xffffffff at 16 match u32 0x00001389 0x0000ffff at 20 classid 52:1 action police index 3867672576 rate 28800bit burst 18000 mtu 1514 mpu 64 conform-exceed drop/ok
filter add dev eth0 parent 52: prio 1 handle 401:3:1 protocol ip u32 ht 401:3: match u32 0xc6120103 0xffffffff at 16 match u32 0x00001388 0x0000ffff at 20 classid 52:1 action police index 3867672577 rate 28800bit burst 18000 mtu 1514 mpu 64 conform-exceed drop/ok
filter add dev eth0 parent 52: prio 1 handle 401:3:2 protocol ip u32 ht 401:3: match u32 0xc6120103 0xffffffff at 16 match u32 0x00001389 0x0000ffff at 20 classid 52:1 action police index 3867672577 rate 28800bit burst 18000 mtu 1514 mpu 64 conform-exceed drop/ok
filter add dev eth0 parent 52: prio 1 handle ::3 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 401:
filter add dev eth0 parent 52: prio 1 handle ::4 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 16 link 401:
EOF
