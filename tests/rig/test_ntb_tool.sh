#!/bin/bash
# Upstream ntb_tool over the emulated NTB: scratchpads and doorbells set by each side are seen on the
# other; data written into each memory window by one side is read back on the other, both directions.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
ntb_tool_up lender borrower1

# Scratchpads: written into the peer's through BAR1, read from our own on the other side.
expect_eq "lender -> borrower1 spad3" "$(rig_run lender -- "$(ntb_tool_dir lender); echo 0xa5a50001 > \$P/spad3" &&
	rig_run borrower1 -- "$(ntb_tool_dir borrower1); cat \$D/spad3")" 0xa5a50001
expect_eq "borrower1 -> lender spad7" "$(rig_run borrower1 -- "$(ntb_tool_dir borrower1); echo 0x5a5a0002 > \$P/spad7" &&
	rig_run lender -- "$(ntb_tool_dir lender); cat \$D/spad7")" 0x5a5a0002
expect_eq "lender reads back borrower1's spad7 via BAR1" \
	"$(rig_run borrower1 -- "$(ntb_tool_dir borrower1); echo 0x12345678 > \$D/spad7" &&
		rig_run lender -- "$(ntb_tool_dir lender); cat \$P/spad7")" 0x12345678

# Doorbells: each side rings a different bit; the other's ISR records it.
for vm in lender borrower1; do
	bit=$([ "$vm" = lender ] && echo 0x2 || echo 0x10)
	rig_run "$vm" -- "$(ntb_tool_dir "$vm"); echo 's $bit' > \$D/peer_db"
	expect "${NTB_PEER[$vm]} sees doorbell $bit from $vm" \
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
		expect_eq "$sender reads back MW$((mw + 1)) through the link" "$got" "$want"
		got=$(rig_run "$receiver" -- "$(ntb_tool_dir "$receiver"); head -c $SIZE \$P/mw$mw | sha256sum | cut -c1-64")
		expect_eq "$receiver finds $sender's MW$((mw + 1)) data in its inbound buffer" "$got" "$want"
	done
done
