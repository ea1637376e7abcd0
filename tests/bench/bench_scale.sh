#!/bin/bash
# Scale figures (issue 17, "scale figures"): what one link's windows, slots and translations hold as more
# devices are borrowed over it, and the kernel memory a borrow takes per GiB of guest RAM. One rig: the
# lender with BENCH_SCALE_NVMES emulated NVMe controllers (default 16, the most a lender lends: one per
# interrupt mailbox slot and BAR window slot, FARPASS_IRQ_SLOTS), all lent to borrower1 over link 1, the
# rig's only link, so each host's farpass counters are that link's. No L2 guests: each device's VFIO user
# is a farpass-client vfio-borrow on borrower1 acting as QEMU (2 MiB of RAM mapped in its container at
# IOVA 1 MiB; bus master on = the borrow), held until all of a step's devices are borrowed.
#  - For 1, 4 and 16 devices borrowed at once (BENCH_SCALE_COUNTS), one after another, then read
#    together: borrower1's DMA sub-windows (debugfs dma_windows), their DMA_LAYOUT slots and the bytes
#    of the link's DMA window they map and span (farpass-client dma-layout), pinned pages, the IOMMU map
#    calls of the borrows (last_borrow map_calls, read after each); the lender's DMA mappings in the
#    devices' containers (its agent's state.json: one VFIO_IOMMU_MAP_DMA each), BARs mapped in the
#    link's BAR window (debugfs bar_maps, xwin_bar_bytes), interrupt eventfds relayed (irq_hooks); the
#    slots the lender gave its lent devices (BAR window and interrupt mailbox, state.json); the NTB
#    windows each host translated (its kernel log's "inbound window N" lines) and the lender agent's
#    mappings of its outbound window (/dev/farpass in its /proc/PID/maps); the borrows' time (the
#    client's bus-master write); the kernel memory (meminfo's kernel fields) both hosts hold then against
#    before the step's clients started (the clients' own processes included).
#  - Kernel memory per borrowed GiB: one device borrowed by a VFIO user with BENCH_SCALE_GIB_MB (1024)
#    MiB mapped, its pages faulted in first: /proc/meminfo of borrower1 and of the lender just before
#    it opens the device (--open-at: the window is staged from its first access after the open,
#    docs/mdev.md) and once borrowed: each field's change, per GiB, and MemFree's
#    fall in none of the fields; once given back and the client gone, the kernel fields and that fall
#    against before it started. Guest RAM pinned is not kernel memory: the VFIO user's pages were
#    allocated (AnonPages) before the first reading.
# L0's load average is printed before and after. Nested TCG rig: times are the emulation's.
set -euo pipefail
# The rig, NTB, kernel and agent libraries, and the e2e suite's timeouts for large borrows.
. "$(dirname "$0")/../e2e/e2e-lib.sh"
ag_check_built && fp_check_built || exit

read -ra COUNTS <<<"${BENCH_SCALE_COUNTS:-1 4 16}"
NVMES=${BENCH_SCALE_NVMES:-16}
GIB_MB=${BENCH_SCALE_GIB_MB:-1024}
B=borrower1
U0=8f7c3ab0-5c6e-4e41-9d3e-00000000be03
# Kernel memory fields of /proc/meminfo (kB; SecPageTables is there from Linux 6.0 on), and those of
# other memory that MemFree's fall around the 1 GiB borrow is split into (SUnreclaim is inside Slab).
KFIELDS=(Slab VmallocUsed PageTables SecPageTables KernelStack Percpu)
OFIELDS=(AnonPages Cached Buffers)

# The DMA window (ntb-epf's MW2) is 4 GiB instead of the rig's 1 GiB: the 1 GiB borrow's sub-window
# (RAM at IOVA 1 MiB, laid out in its 2 MiB phase) is larger than 1 GiB.
RIG_LENDER_NVMES=$NVMES RIG_NTB_PROPS=${RIG_NTB_PROPS:-},mw2-size=4G rig_up --borrowers 1
D=$RIGDIR/$B
PCI=() UUID=() ID=()
for ((k = 0; k < NVMES; k++)); do
	PCI+=("$(rig_lender_nvme_pci $k)")
done
# The 1 GiB borrow's BORROW upcall waits for the lender's dma.map of a 1 GiB slot, which takes longer
# under TCG than borrower1's agent's default call timeout (1.5 s) and the kernel's upcall timeout (2 s):
# both raised as for the e2e suite's guests.
AG_LENT=${PCI[0]} AG_LENT_ALSO=${PCI[*]:1} ag_remote_mdev $B $U0 "" "$E2E_BORROWER_AGENT_CFG"
e2e_slow_upcalls $B
UUID[0]=$U0
for ((k = 1; k < NVMES; k++)); do
	ag_extra_mdev $B "${PCI[k]}"
	UUID[k]=$AG_EXTRA_UUID
done
for ((k = 0; k < NVMES; k++)); do
	ID[k]=$(ag_device_id $B "${PCI[k]}")
done

results=()
line() { results+=("$(printf "$@")"); }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# field NAME TEXT: NAME's value in TEXT's "NAME VALUE" or "NAME: VALUE kB" lines (0 if none).
field() { awk -v n="$1" '$1 == n || $1 == n ":" { v = $2 } END { print v + 0 }' <<<"$2"; }
meminfo() { rig_run "$1" -- "cat /proc/meminfo"; }
# sum MEMINFO FIELD...: the fields' sum (kB).
sum() {
	local f s=0 m=$1
	shift
	for f; do
		s=$((s + $(field "$f" "$m")))
	done
	echo $s
}
kmem() { sum "$1" "${KFIELDS[@]}"; }
# wait_out K REGEX SECONDS: client K's output (on L0: $D is shared) has a line matching REGEX.
wait_out() {
	local i
	for ((i = 0; i < $3 * 5; i++)); do
		grep -Eq "$2" "$D/scale-$1.out" 2>/dev/null && return 0
		sleep 0.2
	done
	echo "client $1 (${PCI[$1]}): no '$2' within $3 s: $(cat "$D/scale-$1.out" 2>/dev/null)" >&2
	return 1
}
# start K ARGS...: client K started on borrower1: vfio-borrow of device K with ARGS, held until $D/go
# exists, then bus master off (RETURN) and close.
start() {
	local k=$1
	shift
	rig_run $B -- "setsid $FP_CLIENT vfio-borrow ${UUID[k]} --id ${ID[k]} $* --hold-until $D/go --then off \
		</dev/null >$D/scale-$k.out 2>&1 &"
}
# borrowed K: true once client K borrowed (prints its "borrowed" line, bm_on=ok), false if it failed (the
# client prints "borrowed" after a failed bus-master write too, with its errno in bm_on).
borrowed() { wait_out "$1" '^(borrowed|ok|err) ' 900 && grep '^borrowed bm_on=ok ' "$D/scale-$1.out"; }
# give_back: the clients started released, each returned and closed, the lender's leases all ended.
give_back() {
	local f k
	touch "$D/go"
	for f in "$D"/scale-*.out; do
		k=${f##*-}
		wait_out "${k%.out}" '^(ok|err) ' 120 || true
	done
	ntb_wait lender 60 "[ \"\$($FP_CTL borrows)\" = 'no borrows' ]"
	rm -f "$D/go" "$D"/scale-*.out
}
# inbound_windows VM: "COUNT SIZES" of the NTB windows farpass translates inbound on VM's link 1 (its
# kernel log's line for each, at the NTB's probe; translated at link up).
inbound_windows() {
	rig_run "$1" -- dmesg | sed -nE "s/.* $(ntb_pci "$1"): inbound window ([0-9]): (0x[0-9a-f]+) bytes .*/\1 \2/p" |
		sort -u | while read -r mw size; do echo "window$mw=$(((size + (1 << 19)) >> 20))MiB"; done | paste -sd, |
		awk -F, '{ print NF, $0 }'
}
# outbound_maps: "COUNT (MiB)" of the lender agent's mappings of /dev/farpass (its outbound window).
outbound_maps() {
	local n=0 mib=0 range
	for range in $(rig_run lender -- "awk '/\\/dev\\/farpass/ { print \$1 }' /proc/\$(cat $RIGDIR/lender/agent.pid)/maps"); do
		n=$((n + 1)) mib=$((mib + ((0x${range#*-} - 0x${range%-*}) >> 20)))
	done
	echo "$n ($mib MiB)"
}

declare -A F
# step N: N devices borrowed at once, read, given back; F[ROW:N] gets the figures.
step() {
	local n=$1 k out lb maps=0 bms=() state cb cl layouts slots=0 bytes=0 end=0 off size s
	local mb0 ml0 ib il
	mb0=$(meminfo $B) ml0=$(meminfo lender)
	for ((k = 0; k < n; k++)); do
		start $k && out=$(borrowed $k) || { give_back && return 1; }
		bms+=("$(fp_field "$out" bm_ms)")
		lb=$(rig_run $B -- "cat $FP_DBG/last_borrow")
		maps=$((maps + $(field map_calls "$lb")))
	done
	cb=$(rig_run $B -- "cat $FP_DBG/counters") cl=$(rig_run lender -- "cat $FP_DBG/counters")
	layouts=$(rig_run $B -- "for id in ${ID[*]:0:n}; do $FP_CLIENT dma-layout --id \$id; done")
	# "ok nr=N pinned=P offsets=O1,O2 slots=GPA+SIZE,...": slots, their bytes, the highest window byte.
	while read -r out; do
		read -ra off <<<"$(fp_field "$out" offsets | tr , ' ')"
		read -ra size <<<"$(fp_field "$out" slots | sed 's/[^,]*+//g' | tr , ' ')"
		for s in "${!off[@]}"; do
			slots=$((slots + 1)) bytes=$((bytes + size[s]))
			((off[s] + size[s] <= end)) || end=$((off[s] + size[s]))
		done
	done <<<"$layouts"
	state=$(rig_run lender -- "cat /var/lib/farpass/state.json")
	F[leases:$n]="$(jq '[.devices[] | select(.lease != null)] | length' <<<"$state") / $(ag_ctl $B --json status |
		jq '[.remote_devices[] | select(.borrowed)] | length')"
	F[subwin:$n]=$(field dma_windows "$cb")
	F[slots:$n]=$slots
	F[bytes:$n]="$((bytes >> 20)) MiB / $(((end + (1 << 20) - 1) >> 20)) MiB"
	F[pinned:$n]=$(field pinned_pages "$cb")
	F[bmaps:$n]=$maps
	F[lmaps:$n]=$(jq '[.devices[].lease // empty | .dma | length] | add // 0' <<<"$state")
	F[bars:$n]="$(field bar_maps "$cl") / $(($(field xwin_bar_bytes "$cl") >> 10)) KiB"
	F[hooks:$n]=$(field irq_hooks "$cl")
	F[lslots:$n]=$(jq '[.devices[].slot] | unique | length' <<<"$state")
	read -r ib WIN_B <<<"$(inbound_windows $B)"
	read -r il WIN_L <<<"$(inbound_windows lender)"
	F[inb:$n]="$ib / $il"
	F[outb:$n]=$(outbound_maps)
	F[bm:$n]=$(printf '%s\n' "${bms[@]}" | awk '{ s += $1; if ($1 > m) m = $1 } END { printf "%.0f / %d", s / NR, m }')
	F[kmem:$n]="$(($(kmem "$(meminfo $B)") - $(kmem "$mb0"))) / $(($(kmem "$(meminfo lender)") - $(kmem "$ml0")))"
	give_back
	cb=$(rig_run $B -- "cat $FP_DBG/counters")
	F[after:$n]="$(field dma_windows "$cb") / $(field pinned_pages "$cb")"
}

line '%s' "L0 load (1/5/15 min) at the start: $(load)"
line '%s' "One link (lender -> borrower1), $NVMES NVMe lent; borrowed by VFIO users on borrower1 (2 MiB RAM each), held at once"
hdr=$(printf ' %17s' "${COUNTS[@]/%/ borrowed}")
line '%-58s%s' "" "$hdr"
missing=()
for n in "${COUNTS[@]}"; do
	((n <= NVMES)) && step "$n" || missing+=("$n devices borrowed at once")
done
rows=(
	"leases:devices borrowed (lender's leases / borrower1's agent)"
	"subwin:DMA sub-windows in the link's DMA window (borrower1)"
	"slots:DMA_LAYOUT slots (guest RAM ranges), all devices"
	"bytes:DMA window: slots' bytes / span (highest byte used)"
	"pinned:pages pinned (borrower1)"
	"bmaps:IOMMU map calls of the borrows (borrower1)"
	"lmaps:DMA mappings in the devices' containers (lender)"
	"bars:BARs mapped in the link's BAR window / bytes (lender)"
	"lslots:BAR window + mailbox slots given (lender, of 16)"
	"hooks:interrupt eventfds relayed (lender; clients arm none)"
	"inb:NTB windows translated inbound (borrower1 / lender)"
	"outb:outbound window mmaps (lender's agent; MiB)"
	"bm:borrow time mean / max (ms, bus-master write)"
	"kmem:kernel memory: clients borrowing - none (kB, B1 / lender)"
	"after:given back: DMA sub-windows / pinned pages (borrower1)"
)
for r in "${rows[@]}"; do
	vals=()
	for n in "${COUNTS[@]}"; do
		vals+=("${F[${r%%:*}:$n]:-n/a}")
	done
	line '%-58s%s' "${r#*:}" "$(printf ' %17s' "${vals[@]}")"
done
line '%s' "NTB windows farpass translates inbound: borrower1 ${WIN_B:-?}, lender ${WIN_L:-?} (window0 BAR, window1 DMA)"

# --- Kernel memory per borrowed GiB: one device, GIB_MB of RAM mapped and faulted in before the first reading.
# per_gib KB: KB per borrowed GiB ($gib).
per_gib() { awk -v d="$1" -v g="$gib" 'BEGIN { printf "%.0f", d / g }'; }
# none MEMINFO-A MEMINFO-B: MemFree's fall from A to B in none of the fields (kB): on Linux 6.1, e.g. IOMMU
# page tables.
none() {
	echo $(($(field MemFree "$1") - $(field MemFree "$2") - $(sum "$2" "${KFIELDS[@]}" "${OFIELDS[@]}") +
		$(sum "$1" "${KFIELDS[@]}" "${OFIELDS[@]}")))
}
line '%s' ""
# shellcheck disable=SC2034 # read through mp=mp$h below
mpb=$(meminfo $B) mpl=$(meminfo lender)
start 0 --mb "$GIB_MB" --open-at "$D/go-open"
if wait_out 0 '^(faulted|ok|err)' 600 && grep -q '^faulted' "$D/scale-0.out"; then
	m0b=$(meminfo $B) m0l=$(meminfo lender)
	touch "$D/go-open"
fi
if borrowed 0 >/dev/null; then
	m1b=$(meminfo $B) m1l=$(meminfo lender)
	lb=$(rig_run $B -- "cat $FP_DBG/last_borrow")
	give_back
	# shellcheck disable=SC2034 # read through m2=m2$h below
	m2b=$(meminfo $B) m2l=$(meminfo lender)
	gib=$(awk -v p="$(field pages "$lb")" 'BEGIN { printf "%.3f", p * 4096 / 2 ^ 30 }')
	line '%s' "Kernel memory of one borrow of $GIB_MB MiB ($(field pages "$lb") pages pinned = $gib GiB, $(field map_calls "$lb") IOMMU map calls); /proc/meminfo, kB"
	line '%-46s %11s %11s %11s %11s' "" borrower1 "per GiB" lender "per GiB"
	for f in MemFree "${KFIELDS[@]}" SUnreclaim "${OFIELDS[@]}" Mlocked; do
		db=$(($(field "$f" "$m1b") - $(field "$f" "$m0b"))) dl=$(($(field "$f" "$m1l") - $(field "$f" "$m0l")))
		line '%-46s %11s %11s %11s %11s' "$f: borrowed - before" "$db" "$(per_gib $db)" "$dl" "$(per_gib $dl)"
	done
	declare -A other kept
	for h in b l; do
		m0=m0$h m1=m1$h m2=m2$h mp=mp$h
		other[$h]=$(none "${!m0}" "${!m1}")
		# Against before the client started: its process, RAM and page tables are gone too by then.
		kept[$h]="$(($(kmem "${!m2}") - $(kmem "${!mp}"))) / $(none "${!mp}" "${!m2}")"
	done
	line '%-46s %11s %11s %11s %11s' "MemFree's fall in none of these fields" "${other[b]}" "$(per_gib "${other[b]}")" \
		"${other[l]}" "$(per_gib "${other[l]}")"
	line '%-46s %23s %23s' "given back, client gone - before it started:" "" ""
	line '%-46s %23s %23s' "  kernel fields / MemFree's fall in none" "${kept[b]}" "${kept[l]}"
else
	missing+=("kernel memory per borrowed GiB")
	line '%s' "Kernel memory per borrowed GiB: n/a (the $GIB_MB MiB borrow failed: $(tr '\n' ' ' <"$D/scale-0.out"))"
	give_back
fi
rm -f "$D/go-open"

line '%s' ""
line '%s' "L0 load at the end: $(load)"
line '%s' "(nested TCG rig: times are the emulation's; counts and bytes are the design's)"
printf '%s\n' "${results[@]}" | tee "$RIGDIR/figures.txt"
((${#missing[@]} == 0)) || { echo "could not measure: $(printf '%s, ' "${missing[@]}" | sed 's/, $//')" && exit 1; }
