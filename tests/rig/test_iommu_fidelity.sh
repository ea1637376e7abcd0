#!/bin/bash
# The emulated NTB executes the peer's window accesses as DMA through the receiving host's IOMMU, as
# hardware does. Each way:
#  (a) a translation to an IOVA that exists only in the receiver's NTB DMA domain (not a RAM address)
#      delivers the peer's write to the right page of the buffer behind it, and nowhere else in it;
#  (b) a translation to an IOVA that is not mapped, chosen equal to the *physical* address of that same
#      buffer, makes the receiver's IOMMU fault (DMAR in its log), writes nothing (an emulation that
#      skipped the IOMMU would hit the buffer), and the peer's read there returns all-ones.
set -euo pipefail
. "$(dirname "$0")/rig.sh"
. "$(dirname "$0")/ntb-lib.sh"

rig_up --borrowers 1
fid() { echo "cd /sys/kernel/debug/ntb_fidelity/$(ntb_pci "$1")"; }
PATTERN=$(printf '%02x' $(seq 1 32)) # 32 bytes, none zero
MW=1                                  # MW2, the 64-bit prefetchable window
SIZE=8192

for vm in lender borrower1; do
	ntb_load "$vm" ntb_fidelity
	rig_run "$vm" -- "$(fid "$vm"); echo 1 > link"
done
for vm in lender borrower1; do
	expect "$vm: link up" ntb_wait "$vm" 30 "$(fid "$vm"); grep -q ^up link"
done

# Bytes of the receiver's buffer that are not zero; and the 32 bytes at OFFSET as hex.
nonzero() { rig_run "$1" -- "$(fid "$1"); tr -d '\\0' < buf | wc -c"; }
bytes_at() { rig_run "$1" -- "$(fid "$1"); dd if=buf bs=1 skip=\$(($2)) count=32 status=none | od -An -tx1 -v | tr -d ' \\n'"; }
# Sender: write PATTERN at OFFSET of its outbound window, then read 32 bytes back over the link (the
# read also orders: the peer has executed the write when it answers).
send_and_read() {
	rig_run "$1" -- "$(fid "$1"); echo '$MW $2 $PATTERN' > peer_mw; echo 'read $MW $2 32' > peer_mw; cat peer_mw" |
		tr -d ' \n'
}

for receiver in borrower1 lender; do
	sender=${NTB_PEER[$receiver]}
	read -r _ iova _ size _ phys < <(rig_run "$receiver" -- "$(fid "$receiver"); echo $SIZE > alloc; echo 0 > buf; cat alloc")
	echo "$receiver: buffer iova $iova phys $phys size $size"
	expect "$receiver: the IOVA is not a RAM address (exists only in the NTB's domain)" \
		rig_run "$receiver" -- "i=\$(($iova)); ! grep 'System RAM' /proc/iomem | while IFS='- :' read -r a b _; do
			[ \$i -ge \$((0x\$a)) ] && [ \$i -le \$((0x\$b)) ] && exit 1; done; true"

	# (a) the second page of the buffer, 0x100 into it
	rig_run "$receiver" -- "$(fid "$receiver"); echo '$MW $iova $SIZE' > trans"
	expect_eq "$sender reads back what it wrote via $receiver's IOVA" "$(send_and_read "$sender" 0x1100)" "$PATTERN"
	expect_eq "$receiver: data at buffer offset 0x1100" "$(bytes_at "$receiver" 0x1100)" "$PATTERN"
	expect_eq "$receiver: nothing else in the buffer changed (non-zero bytes)" "$(nonzero "$receiver")" 32

	# (b) the buffer's physical address, which is not an IOVA of the NTB's domain
	faults_before=$(rig_run "$receiver" -- "dmesg | grep -c 'DMAR.*fault addr' || true")
	rig_run "$receiver" -- "$(fid "$receiver"); echo 0 > buf; echo '$MW $phys $SIZE' > trans"
	expect_eq "$sender reads all-ones from an unmapped IOVA" "$(send_and_read "$sender" 0)" \
		"$(printf 'ff%.0s' $(seq 32))"
	expect_eq "$receiver: buffer untouched" "$(nonzero "$receiver")" 0
	expect "$receiver: DMAR fault logged at $phys" ntb_wait "$receiver" 10 \
		"dmesg | grep -i 'DMAR.*fault addr $phys' && [ \$(dmesg | grep -c 'DMAR.*fault addr') -gt $faults_before ]"
	rig_run "$receiver" -- "dmesg | grep -i 'DMAR.*fault' | tail -3"
	rig_run "$receiver" -- "$(fid "$receiver"); echo '$MW clear' > trans; echo 0 > alloc"
done
