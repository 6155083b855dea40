#!/bin/sh
set -e
ip link add name rl-eth0 numtxqueues 2 type ifb
ip link set dev rl-eth0 up
tc -batch - <<'EOF'
qdisc add dev eth0 root handle 52: mq
qdisc add dev eth0 parent 52:1 handle 54: stab overhead -46 linklayer ethernet htb default 0
class add dev eth0 parent 54: classid 54:1 htb rate 8bit ceil 8bit burst 125000b cburst 125000b quantum 1468
qdisc add dev eth0 parent 52:2 handle 55: stab overhead -46 linklayer ethernet htb default 0
class add dev eth0 parent 55: classid 55:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev eth0 parent 55:1 classid 55:10 htb rate 53728bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev eth0 parent 55:10 handle fffe: htb default 0
class add dev eth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev eth0 parent fffe:1 classid fffe:100 htb rate 26864bit ceil 100mbit burst 4b cburst 4b quantum 1468
qdisc add dev eth0 parent fffe:100 handle 100: netem limit 13 delay 50ms rate 26864bit
class add dev eth0 parent fffe:1 classid fffe:101 htb rate 26864bit ceil 100mbit burst 4b cburst 4b quantum 1468
qdisc add dev eth0 parent fffe:101 handle 101: netem limit 13 delay 50ms rate 26864bit
filter add dev eth0 parent fffe: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev eth0 parent fffe: prio 3 handle 3:2:1 protocol ip u32 ht 3:2: match u32 0xc6120102 0xffffffff at 16 classid fffe:100
filter add dev eth0 parent fffe: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc6120103 0xffffffff at 16 classid fffe:101
filter add dev eth0 parent fffe: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 16 link 3:
class add dev eth0 parent 55:1 classid 55:11 htb rate 62982bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev eth0 parent 55:11 handle ffeb: htb default 0
class add dev eth0 parent ffeb: classid ffeb:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev eth0 parent ffeb:1 classid ffeb:100 htb rate 62982bit ceil 100mbit burst 8b cburst 8b quantum 1468
qdisc add dev eth0 parent ffeb:100 handle 102: netem limit 11 delay 5ms rate 62982bit
filter add dev eth0 parent ffeb: prio 4 handle 3: protocol ipv6 u32 divisor 256
filter add dev eth0 parent ffeb: prio 4 handle 3:2:1 protocol ipv6 u32 ht 3:2: match u32 0x20010db8 0xffffffff at 24 match u32 0x00010000 0xffffffff at 28 match u32 0x00000000 0xffffffff at 32 match u32 0x00000002 0xffffffff at 36 classid ffeb:100
filter add dev eth0 parent ffeb: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 36 link 3:
qdisc add dev eth0 clsact
EOF
# bpf: map on dev eth0: hash, key (family, kind, port, address) 20 bytes, value (queue_mapping, priority) 8 bytes, 3 entries
# bpf: map on dev eth0: ip 198.18.1.2 every packet -> tx queue 1 (queue_mapping 2), class 55:10
# bpf: map on dev eth0: ip 198.18.1.3 every packet -> tx queue 1 (queue_mapping 2), class 55:10
# bpf: map on dev eth0: ipv6 2001:db8:1::2 every packet -> tx queue 1 (queue_mapping 2), class 55:11
# bpf: program ratelimit_q (sched_cls), loaded with the map of dev eth0 and attached as: filter add dev eth0 egress prio 1 handle 1 bpf direct-action
#      0: r6 = r1
#      1: *(u64 *)(r10 -24) = 0
#      2: *(u64 *)(r10 -16) = 0
#      3: *(u64 *)(r10 -8) = 0
#      4: r7 = *(u32 *)(r6 +16)
#      5: if r7 == 8 goto ipv4
#      6: if r7 == 0xdd86 goto ipv6
#      7: goto miss
#   ipv4:
#      8: r1 = r6
#      9: r2 = 0
#     10: r3 = r10
#     11: r3 += -64
#     12: r4 = 20
#     13: r5 = 1
#     14: call bpf_skb_load_bytes_relative
#     15: if r0 == 0 goto ipv4_header_done
#     16: r2 = *(u32 *)(r6 +0)
#     17: if r2 <= 128 goto ipv4_header_pull
#     18: r2 = 128
#   ipv4_header_pull:
#     19: r1 = r6
#     20: call bpf_skb_pull_data
#     21: r1 = r6
#     22: r2 = 0
#     23: r3 = r10
#     24: r3 += -64
#     25: r4 = 20
#     26: r5 = 1
#     27: call bpf_skb_load_bytes_relative
#     28: if r0 != 0 goto others
#   ipv4_header_done:
#     29: r1 = *(u32 *)(r10 -48)
#     30: *(u32 *)(r10 -20) = r1
#     31: *(u8 *)(r10 -24) = 4
#     32: r1 = *(u8 *)(r10 -64)
#     33: r1 &= 15
#     34: if r1 != 5 goto host
#     35: r1 = *(u16 *)(r10 -58)
#     36: r1 &= 0xff1f
#     37: if r1 != 0 goto host
#     38: r1 = *(u8 *)(r10 -55)
#     39: r8 = 20
#     40: if r1 == 6 goto ports
#     41: if r1 == 17 goto ports
#     42: goto host
#   ipv6:
#     43: r1 = r6
#     44: r2 = 0
#     45: r3 = r10
#     46: r3 += -64
#     47: r4 = 40
#     48: r5 = 1
#     49: call bpf_skb_load_bytes_relative
#     50: if r0 == 0 goto ipv6_header_done
#     51: r2 = *(u32 *)(r6 +0)
#     52: if r2 <= 128 goto ipv6_header_pull
#     53: r2 = 128
#   ipv6_header_pull:
#     54: r1 = r6
#     55: call bpf_skb_pull_data
#     56: r1 = r6
#     57: r2 = 0
#     58: r3 = r10
#     59: r3 += -64
#     60: r4 = 40
#     61: r5 = 1
#     62: call bpf_skb_load_bytes_relative
#     63: if r0 != 0 goto others
#   ipv6_header_done:
#     64: r1 = *(u32 *)(r10 -40)
#     65: *(u32 *)(r10 -20) = r1
#     66: r1 = *(u32 *)(r10 -36)
#     67: *(u32 *)(r10 -16) = r1
#     68: r1 = *(u32 *)(r10 -32)
#     69: *(u32 *)(r10 -12) = r1
#     70: r1 = *(u32 *)(r10 -28)
#     71: *(u32 *)(r10 -8) = r1
#     72: *(u8 *)(r10 -24) = 6
#     73: r1 = *(u8 *)(r10 -58)
#     74: r8 = 40
#     75: if r1 == 6 goto ports
#     76: if r1 == 17 goto ports
#     77: goto host
#   ports:
#     78: r1 = r6
#     79: r2 = r8
#     80: r3 = r10
#     81: r3 += -72
#     82: r4 = 4
#     83: r5 = 1
#     84: call bpf_skb_load_bytes_relative
#     85: if r0 == 0 goto ports_read_done
#     86: r2 = *(u32 *)(r6 +0)
#     87: if r2 <= 128 goto ports_read_pull
#     88: r2 = 128
#   ports_read_pull:
#     89: r1 = r6
#     90: call bpf_skb_pull_data
#     91: r1 = r6
#     92: r2 = r8
#     93: r3 = r10
#     94: r3 += -72
#     95: r4 = 4
#     96: r5 = 1
#     97: call bpf_skb_load_bytes_relative
#     98: if r0 != 0 goto host
#   ports_read_done:
#     99: r1 = *(u16 *)(r10 -70)
#    100: *(u16 *)(r10 -22) = r1
#    101: r1 = map[queues] ll
#    103: r2 = r10
#    104: r2 += -24
#    105: call bpf_map_lookup_elem
#    106: if r0 != 0 goto hit
#    107: *(u16 *)(r10 -22) = 0
#   host:
#    108: *(u8 *)(r10 -23) = 1
#    109: r1 = map[queues] ll
#    111: r2 = r10
#    112: r2 += -24
#    113: call bpf_map_lookup_elem
#    114: if r0 != 0 goto hit
#   others:
#    115: *(u64 *)(r10 -24) = 0
#    116: *(u64 *)(r10 -16) = 0
#    117: *(u64 *)(r10 -8) = 0
#    118: *(u8 *)(r10 -23) = 2
#    119: r1 = map[queues] ll
#    121: r2 = r10
#    122: r2 += -24
#    123: call bpf_map_lookup_elem
#    124: if r0 != 0 goto hit
#   miss:
#    125: r1 = *(u32 *)(r6 +32)
#    126: r1 >>= 16
#    127: r1 -= 84
#    128: if r1 >= 128 goto out
#    129: r1 = 0
#    130: *(u32 *)(r6 +32) = r1
#   out:
#    131: r0 = 0
#    132: exit
#   hit:
#    133: r1 = *(u32 *)(r0 +0)
#    134: *(u32 *)(r6 +12) = r1
#    135: r1 = *(u32 *)(r0 +4)
#    136: *(u32 *)(r6 +32) = r1
#    137: r0 = 0
#    138: exit
tc -batch - <<'EOF'
filter add dev eth0 parent ffff:fff2 prio 1 handle ::1 protocol all u32 match u32 0x00000000 0x00000000 at 0 action mirred egress redirect dev rl-eth0
qdisc add dev rl-eth0 root handle 52: mq
qdisc add dev rl-eth0 parent 52:1 handle 54: stab overhead -46 linklayer ethernet htb default 0
class add dev rl-eth0 parent 54: classid 54:1 htb rate 8bit ceil 8bit burst 125000b cburst 125000b quantum 1468
qdisc add dev rl-eth0 parent 52:2 handle 55: stab overhead -46 linklayer ethernet htb default 0
class add dev rl-eth0 parent 55: classid 55:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev rl-eth0 parent 55:1 classid 55:10 htb rate 53728bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev rl-eth0 parent 55:10 handle fffe: htb default 0
class add dev rl-eth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev rl-eth0 parent fffe:1 classid fffe:100 htb rate 26864bit ceil 100mbit burst 4b cburst 4b quantum 1468
qdisc add dev rl-eth0 parent fffe:100 handle 100: netem limit 4 delay 50ms rate 26864bit
class add dev rl-eth0 parent fffe:1 classid fffe:101 htb rate 26864bit ceil 100mbit burst 4b cburst 4b quantum 1468
qdisc add dev rl-eth0 parent fffe:101 handle 101: netem limit 4 delay 50ms rate 26864bit
filter add dev rl-eth0 parent fffe: prio 3 handle 3: protocol ip u32 divisor 256
filter add dev rl-eth0 parent fffe: prio 3 handle 3:2:1 protocol ip u32 ht 3:2: match u32 0xc6120102 0xffffffff at 12 classid fffe:100
filter add dev rl-eth0 parent fffe: prio 3 handle 3:3:1 protocol ip u32 ht 3:3: match u32 0xc6120103 0xffffffff at 12 classid fffe:101
filter add dev rl-eth0 parent fffe: prio 3 handle ::1 protocol ip u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 12 link 3:
class add dev rl-eth0 parent 55:1 classid 55:11 htb rate 62982bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev rl-eth0 parent 55:11 handle ffeb: htb default 0
class add dev rl-eth0 parent ffeb: classid ffeb:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev rl-eth0 parent ffeb:1 classid ffeb:100 htb rate 62982bit ceil 100mbit burst 8b cburst 8b quantum 1468
qdisc add dev rl-eth0 parent ffeb:100 handle 102: netem limit 11 delay 5ms rate 62982bit
filter add dev rl-eth0 parent ffeb: prio 4 handle 3: protocol ipv6 u32 divisor 256
filter add dev rl-eth0 parent ffeb: prio 4 handle 3:2:1 protocol ipv6 u32 ht 3:2: match u32 0x20010db8 0xffffffff at 8 match u32 0x00010000 0xffffffff at 12 match u32 0x00000000 0xffffffff at 16 match u32 0x00000002 0xffffffff at 20 classid ffeb:100
filter add dev rl-eth0 parent ffeb: prio 4 handle ::1 protocol ipv6 u32 match u32 0x00000000 0x00000000 at 0 hashkey mask 0x000000ff at 20 link 3:
qdisc add dev rl-eth0 clsact
EOF
# bpf: map on dev rl-eth0: hash, key (family, kind, port, address) 20 bytes, value (queue_mapping, priority) 8 bytes, 3 entries
# bpf: map on dev rl-eth0: ip 198.18.1.2 every packet -> tx queue 1 (queue_mapping 2), class 55:10
# bpf: map on dev rl-eth0: ip 198.18.1.3 every packet -> tx queue 1 (queue_mapping 2), class 55:10
# bpf: map on dev rl-eth0: ipv6 2001:db8:1::2 every packet -> tx queue 1 (queue_mapping 2), class 55:11
# bpf: program ratelimit_q (sched_cls), loaded with the map of dev rl-eth0 and attached as: filter add dev rl-eth0 egress prio 1 handle 1 bpf direct-action
#      0: r6 = r1
#      1: *(u64 *)(r10 -24) = 0
#      2: *(u64 *)(r10 -16) = 0
#      3: *(u64 *)(r10 -8) = 0
#      4: r7 = *(u32 *)(r6 +16)
#      5: if r7 == 8 goto ipv4
#      6: if r7 == 0xdd86 goto ipv6
#      7: goto miss
#   ipv4:
#      8: r1 = r6
#      9: r2 = 0
#     10: r3 = r10
#     11: r3 += -64
#     12: r4 = 20
#     13: r5 = 1
#     14: call bpf_skb_load_bytes_relative
#     15: if r0 == 0 goto ipv4_header_done
#     16: r2 = *(u32 *)(r6 +0)
#     17: if r2 <= 128 goto ipv4_header_pull
#     18: r2 = 128
#   ipv4_header_pull:
#     19: r1 = r6
#     20: call bpf_skb_pull_data
#     21: r1 = r6
#     22: r2 = 0
#     23: r3 = r10
#     24: r3 += -64
#     25: r4 = 20
#     26: r5 = 1
#     27: call bpf_skb_load_bytes_relative
#     28: if r0 != 0 goto others
#   ipv4_header_done:
#     29: r1 = *(u32 *)(r10 -52)
#     30: *(u32 *)(r10 -20) = r1
#     31: *(u8 *)(r10 -24) = 4
#     32: r1 = *(u8 *)(r10 -64)
#     33: r1 &= 15
#     34: if r1 != 5 goto host
#     35: r1 = *(u16 *)(r10 -58)
#     36: r1 &= 0xff1f
#     37: if r1 != 0 goto host
#     38: r1 = *(u8 *)(r10 -55)
#     39: r8 = 20
#     40: if r1 == 6 goto ports
#     41: if r1 == 17 goto ports
#     42: goto host
#   ipv6:
#     43: r1 = r6
#     44: r2 = 0
#     45: r3 = r10
#     46: r3 += -64
#     47: r4 = 40
#     48: r5 = 1
#     49: call bpf_skb_load_bytes_relative
#     50: if r0 == 0 goto ipv6_header_done
#     51: r2 = *(u32 *)(r6 +0)
#     52: if r2 <= 128 goto ipv6_header_pull
#     53: r2 = 128
#   ipv6_header_pull:
#     54: r1 = r6
#     55: call bpf_skb_pull_data
#     56: r1 = r6
#     57: r2 = 0
#     58: r3 = r10
#     59: r3 += -64
#     60: r4 = 40
#     61: r5 = 1
#     62: call bpf_skb_load_bytes_relative
#     63: if r0 != 0 goto others
#   ipv6_header_done:
#     64: r1 = *(u32 *)(r10 -56)
#     65: *(u32 *)(r10 -20) = r1
#     66: r1 = *(u32 *)(r10 -52)
#     67: *(u32 *)(r10 -16) = r1
#     68: r1 = *(u32 *)(r10 -48)
#     69: *(u32 *)(r10 -12) = r1
#     70: r1 = *(u32 *)(r10 -44)
#     71: *(u32 *)(r10 -8) = r1
#     72: *(u8 *)(r10 -24) = 6
#     73: r1 = *(u8 *)(r10 -58)
#     74: r8 = 40
#     75: if r1 == 6 goto ports
#     76: if r1 == 17 goto ports
#     77: goto host
#   ports:
#     78: r1 = r6
#     79: r2 = r8
#     80: r3 = r10
#     81: r3 += -72
#     82: r4 = 4
#     83: r5 = 1
#     84: call bpf_skb_load_bytes_relative
#     85: if r0 == 0 goto ports_read_done
#     86: r2 = *(u32 *)(r6 +0)
#     87: if r2 <= 128 goto ports_read_pull
#     88: r2 = 128
#   ports_read_pull:
#     89: r1 = r6
#     90: call bpf_skb_pull_data
#     91: r1 = r6
#     92: r2 = r8
#     93: r3 = r10
#     94: r3 += -72
#     95: r4 = 4
#     96: r5 = 1
#     97: call bpf_skb_load_bytes_relative
#     98: if r0 != 0 goto host
#   ports_read_done:
#     99: r1 = *(u16 *)(r10 -72)
#    100: *(u16 *)(r10 -22) = r1
#    101: r1 = map[queues] ll
#    103: r2 = r10
#    104: r2 += -24
#    105: call bpf_map_lookup_elem
#    106: if r0 != 0 goto hit
#    107: *(u16 *)(r10 -22) = 0
#   host:
#    108: *(u8 *)(r10 -23) = 1
#    109: r1 = map[queues] ll
#    111: r2 = r10
#    112: r2 += -24
#    113: call bpf_map_lookup_elem
#    114: if r0 != 0 goto hit
#   others:
#    115: *(u64 *)(r10 -24) = 0
#    116: *(u64 *)(r10 -16) = 0
#    117: *(u64 *)(r10 -8) = 0
#    118: *(u8 *)(r10 -23) = 2
#    119: r1 = map[queues] ll
#    121: r2 = r10
#    122: r2 += -24
#    123: call bpf_map_lookup_elem
#    124: if r0 != 0 goto hit
#   miss:
#    125: r1 = *(u32 *)(r6 +32)
#    126: r1 >>= 16
#    127: r1 -= 84
#    128: if r1 >= 128 goto out
#    129: r1 = 0
#    130: *(u32 *)(r6 +32) = r1
#   out:
#    131: r0 = 0
#    132: exit
#   hit:
#    133: r1 = *(u32 *)(r0 +0)
#    134: *(u32 *)(r6 +12) = r1
#    135: r1 = *(u32 *)(r0 +4)
#    136: *(u32 *)(r6 +32) = r1
#    137: r0 = 0
#    138: exit
