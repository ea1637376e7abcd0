#!/bin/bash
# The upstream NTB clients over the emulated NTB, one after the other in one rig (each unloaded on both
# ends before the next loads; a rig each proved nothing more and cost 15-20 s apiece):
#  (perf) ntb_perf, each direction: the MW set-up handshake (scratchpads and doorbells) completes, and a
#         transfer through the memory window finishes without error. The throughput is printed; `make
#         bench` reports it, this test only needs the transfer to complete;
#  (pingpong) ntb_pingpong: each side rings the other's doorbell and passes a counter through the
#         scratchpads; both counters keep rising;
#  (transport) ntb_transport + ntb_netdev: an Ethernet link over the NTB memory windows and doorbells
#         carries a ping each way, and a payload larger than one MTU-sized ring entry;
#  (tool) ntb_tool: scratchpads and doorbells set by each side are seen on the other; data written into
#         each memory window by one side is read back on the other, both directions. Last: 6.12's
#         ntb_tool oopses when unloaded with a peer window set up (tool_remove() removes its debugfs
#         directory, then the window's file that went with it: a NULL dereference in debugfs_remove()).
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
# unload MODULE...: the modules removed on both ends of link 1, which frees the NTB for the next client.
unload() {
	local vm
	for vm in lender borrower1; do
		expect "$vm: rmmod $*" rig_run "$vm" -- "rmmod $*"
	done
}

echo "# (perf)"
for vm in lender borrower1; do
	# 1 MiB in 64 KiB chunks into a 1 MiB inbound buffer: enough to cross the link many times.
	out=$(ntb_perf_run "$vm" total_order=20 chunk_order=16 max_mw_size=1048576)
	printf '%s\n' "$out"
	expect "(perf) $vm -> peer: no thread error" eval '! grep -q "error status" <<<"$out"'
	expect "(perf) $vm -> peer: 1 MiB copied" grep -q 'copied 1048576 bytes' <<<"$out"
done
unload ntb_perf

echo "# (pingpong)"
count() { rig_run "$1" -- "cat /sys/kernel/debug/ntb_pingpong/$(ntb_pci "$1")/count"; }

for vm in lender borrower1; do
	ntb_load "$vm" ntb_pingpong delay_ms=20
done
for vm in lender borrower1; do
	expect "(pingpong) $vm: ping-pong under way" ntb_wait "$vm" 60 \
		"[ \$(cat /sys/kernel/debug/ntb_pingpong/$(ntb_pci "$vm")/count) -gt 5 ]"
done
for vm in lender borrower1; do
	a=$(count "$vm")
	sleep 3
	b=$(count "$vm")
	expect "(pingpong) $vm: counter rose from $a to $b in 3 s" test "$b" -gt "$a"
done
unload ntb_pingpong

echo "# (transport)"
for vm in lender borrower1; do
	expect "(transport) $vm: ntb_netdev interface addressed and up" ntb_net_up "$vm"
done
for vm in lender borrower1; do
	expect "(transport) $vm: carrier up" ntb_net_carrier "$vm"
done
expect "(transport) lender pings borrower1 over the NTB" rig_run lender -- "ping -c 3 -W 5 ${NTB_NET_IP[borrower1]}"
expect "(transport) borrower1 pings lender over the NTB" rig_run borrower1 -- "ping -c 3 -W 5 ${NTB_NET_IP[lender]}"
expect "(transport) 8000-byte ping (fragmented) crosses" rig_run borrower1 -- "ping -c 2 -W 5 -s 8000 ${NTB_NET_IP[lender]}"
unload ntb_netdev ntb_transport

echo "# (tool)"
ntb_tool_up lender borrower1
# Scratchpads: written into the peer's through BAR1, read from our own on the other side.
expect_eq "(tool) lender -> borrower1 spad3" "$(rig_run lender -- "$(ntb_tool_dir lender); echo 0xa5a50001 > \$P/spad3" &&
	rig_run borrower1 -- "$(ntb_tool_dir borrower1); cat \$D/spad3")" 0xa5a50001
expect_eq "(tool) borrower1 -> lender spad7" "$(rig_run borrower1 -- "$(ntb_tool_dir borrower1); echo 0x5a5a0002 > \$P/spad7" &&
	rig_run lender -- "$(ntb_tool_dir lender); cat \$D/spad7")" 0x5a5a0002
expect_eq "(tool) lender reads back borrower1's spad7 via BAR1" \
	"$(rig_run borrower1 -- "$(ntb_tool_dir borrower1); echo 0x12345678 > \$D/spad7" &&
		rig_run lender -- "$(ntb_tool_dir lender); cat \$P/spad7")" 0x12345678

# Doorbells: each side rings a different bit; the other's ISR records it.
for vm in lender borrower1; do
	bit=$([ "$vm" = lender ] && echo 0x2 || echo 0x10)
	rig_run "$vm" -- "$(ntb_tool_dir "$vm"); echo 's $bit' > \$D/peer_db"
	expect "(tool) ${NTB_PEER[$vm]} sees doorbell $bit from $vm" \
		ntb_wait "${NTB_PEER[$vm]}" 10 "$(ntb_tool_dir "${NTB_PEER[$vm]}"); [ \$(cat \$D/db) = $bit ]"
done

# Memory windows: the receiver allocates an inbound buffer (an IOVA of its NTB's DMA domain) for each
# window; the sender writes 16 KiB of random data through its outbound window and reads it back over
# the link; the receiver finds the same bytes in its buffer.
SIZE=16384
head -c $SIZE /dev/urandom >"$RIGDIR/pattern"
want=$(sha256sum <"$RIGDIR/pattern" | cut -c1-64)
for sender in lender borrower1; do
	receiver=${NTB_PEER[$sender]}
	rig_run "$receiver" -- "$(ntb_tool_dir "$receiver"); echo $SIZE > \$P/mw_trans0; echo $SIZE > \$P/mw_trans1; cat \$P/mw_trans1 | head -3"
	for mw in 0 1; do
		got=$(rig_run "$sender" -- "$(ntb_tool_dir "$sender"); echo 0:$SIZE > \$P/peer_mw_trans$mw
dd if=$RIGDIR/pattern of=\$P/peer_mw$mw bs=$SIZE count=1 status=none
head -c $SIZE \$P/peer_mw$mw | sha256sum | cut -c1-64")
		expect_eq "(tool) $sender reads back MW$((mw + 1)) through the link" "$got" "$want"
		got=$(rig_run "$receiver" -- "$(ntb_tool_dir "$receiver"); head -c $SIZE \$P/mw$mw | sha256sum | cut -c1-64")
		expect_eq "(tool) $receiver finds $sender's MW$((mw + 1)) data in its inbound buffer" "$got" "$want"
	done
done
