# shellcheck shell=bash
# Hangs of an L1 kernel under TCG: an RCU stall or a soft lockup on its console (docs/rig.md, "L1 kernel
# hangs"). rig.sh boots a VM whose boot hung again, once; tests/run-suites.sh runs a failed test whose rig
# hung once more. Both ask l1_hang_verdict whether the hang may be ours; if it may, nothing is retried.
# Sourced by both.

L1_HANG_RE='rcu: INFO: .*detected (expedited )?stall|watchdog: BUG: soft lockup'
# A frame of a module of the device path ([farpass], [ntb_hw_epf], [vfio_iommu_type1], [mdev], ...), or of
# the built-in IOMMU code (intel_iommu_map_pages, __iommu_map, dmar_..., qi_submit_sync, ...).
L1_HANG_OURS_MOD_RE='\[(farpass|ntb[a-z0-9_]*|vfio[a-z0-9_]*|mdev|iommufd)\]'
L1_HANG_OURS_SYM_RE='(^|[^A-Za-z0-9_])(__)?(iommu|intel_iommu|dmar|qi_|iova|dma_pte|domain_|vfio|mdev|ntb|fp_|farpass)[A-Za-z0-9_.]*\+0x[0-9a-f]+/0x[0-9a-f]+'
# What the emulated NTB's QEMU logs when a window read outlived timeout-ms: a vCPU waited that long in it,
# holding QEMU's global lock.
L1_HANG_NTB_TIMEOUT_RE='ntb-epf .*: read of window [0-9]+ timed out'
L1_BOOT_MARK='===== rig: boot '
L1_HANG_REBOOT_MARK='after a kernel hang'

# l1_boot_marker VM EPOCH [REASON]: the line the launcher appends to a VM's console.log and qemu.log
# when it starts the VM at EPOCH (date +%s.%N): it tells one attempt's text from an earlier one's.
l1_boot_marker() {
	printf '\n%s%s at %s (epoch %s)%s =====\n' "$L1_BOOT_MARK" "$1" "$(date +%T.%N)" "$2" "${3:+ $3}"
}

# l1_log_window FILE SINCE: the text of FILE's boots that began at or after epoch SINCE, less each boot
# the launcher ended because it hung (the marker of the boot after it says so): that hang was handled by
# booting again and must not count for a later failure.
l1_log_window() {
	tr -d '\r' <"$1" 2>/dev/null | awk -v since="$2" -v mark="$L1_BOOT_MARK" -v again="$L1_HANG_REBOOT_MARK" '
		index($0, mark) == 1 {
			if (keep && index($0, again) == 0) printf "%s", seg
			seg = ""
			e = $0; sub(/.*\(epoch /, "", e); sub(/\).*/, "", e)
			keep = (e + 0 >= since + 0)
		}
		{ seg = seg $0 "\n" }
		END { if (keep) printf "%s", seg }'
}

# l1_report_from RE: the text on stdin from its first line matching RE on. Status 1 if none matches.
l1_report_from() {
	awk -v re="$1" '$0 ~ re { found = 1 } found { print } END { exit !found }'
}

# l1_hang_report: the hang reports in the text on stdin, whole: everything from the first one on (a
# later report, or the backtraces the first one asked for, follow it). Status 1 if there is none.
l1_hang_report() { l1_report_from "$L1_HANG_RE"; }

# _l1_cpus_without_backtrace: the CPUs a report on stdin names as stalled (RCU stall lists, a starved
# grace-period kthread's ->cpu, a soft lockup's CPU#) that have no backtrace in it: an "NMI backtrace for
# cpu N", "Task dump for CPU N" or "CPU: N PID:" header followed by at least one frame. Prints one per line.
_l1_cpus_without_backtrace() {
	awk '
		function frame(s) { return s ~ /[A-Za-z_][A-Za-z0-9_.]*\+0x[0-9a-f]+\/0x[0-9a-f]+/ }
		{ sub(/^\[ *[0-9.]+\] /, "") }
		/^rcu:[ \t]+[0-9]+-/ { c = $2; sub(/-.*/, "", c); stalled[c] = 1 }
		/rcu: INFO: .*detected expedited stalls.*\{/ {
			s = $0; sub(/.*\{ */, "", s); sub(/ *\}.*/, "", s); n = split(s, a, / +/)
			for (i = 1; i <= n; i++) { c = a[i]; sub(/-.*/, "", c); if (c ~ /^[0-9]+$/) stalled[c] = 1 }
		}
		/kthread starved for .*->cpu=[0-9]+/ { c = $0; sub(/.*->cpu=/, "", c); sub(/[^0-9].*/, "", c); stalled[c] = 1 }
		/soft lockup - CPU#[0-9]+/ { c = $0; sub(/.*CPU#/, "", c); sub(/[^0-9].*/, "", c); stalled[c] = 1 }
		/^NMI backtrace for cpu [0-9]+$|^Task dump for CPU [0-9]+:|^CPU: [0-9]+ PID:/ {
			c = $0; sub(/^(NMI backtrace for cpu|Task dump for CPU|CPU:) /, "", c); sub(/[^0-9].*/, "", c); cur = c
			next
		}
		/^NMI backtrace for cpu [0-9]+ skipped/ { cur = ""; next }
		frame($0) { anyframe = 1; if (cur != "") traced[cur] = 1 }
		END {
			for (c in stalled) { named++; if (!(c in traced)) print c }
			if (!named && !anyframe) print "?"	# no CPU named and no frame at all: nothing to go by
		}'
}

# _l1_frame_of_ours REPORT: whether REPORT has a frame of farpass, NTB, VFIO, mdev or IOMMU code; prints
# "a frame of ours: " and the first.
_l1_frame_of_ours() {
	local frame
	frame=$(grep -m1 -oE "$L1_HANG_OURS_MOD_RE|$L1_HANG_OURS_SYM_RE" <<<"$1" | head -n1 | sed 's/^[^A-Za-z_[]*//')
	[ -n "$frame" ] || return 1
	printf 'a frame of ours: %s\n' "$frame"
}

# l1_hang_verdict [--boot] CONSOLE QEMULOG SINCE: whether CONSOLE's text since epoch SINCE
# (l1_log_window) has a hang report that may be ours. Status 0, printing the report's first line: a hang
# that is not ours (a retry is allowed). Status 1: no hang. Status 2, printing why: it may be ours, never
# retried. It may be ours when the report (read whole) has a frame of farpass, NTB, VFIO, mdev or IOMMU
# code; when a stalled CPU shows no backtrace (so nothing says what it ran); or when that VM's QEMU logged
# an ntb-epf read timeout in the same window. --boot (the launcher, before the test loads any module of
# ours) leaves out the backtrace rule: then no code of ours runs in the guest, and ntb-epf blocks a vCPU
# only in a window read, which needs a driver.
l1_hang_verdict() {
	local boot=0 report cpus
	if [ "$1" = --boot ]; then
		boot=1
		shift
	fi
	report=$(l1_log_window "$1" "$3" | l1_hang_report) || return 1
	_l1_frame_of_ours "$report" && return 2
	if ((!boot)) && cpus=$(_l1_cpus_without_backtrace <<<"$report") && [ -n "$cpus" ]; then
		printf 'stalled CPU %s shows no backtrace\n' "$(paste -sd, <<<"$cpus")"
		return 2
	fi
	if l1_log_window "$2" "$3" | grep -qE "$L1_HANG_NTB_TIMEOUT_RE"; then
		printf 'its QEMU logged an ntb-epf read timeout: %s\n' \
			"$(l1_log_window "$2" "$3" | grep -m1 -oE "$L1_HANG_NTB_TIMEOUT_RE")"
		return 2
	fi
	head -n 1 <<<"$report"
}

# A crash report of an L1 kernel: an oops, a BUG, a panic.
L1_CRASH_RE='Oops: |BUG: |Kernel panic - |general protection fault|invalid opcode: '

# l1_boot_crash_verdict CONSOLE SINCE: whether the boots of CONSOLE since epoch SINCE (l1_log_window) show
# a kernel crash that is not ours, for the launcher when a VM's QEMU exited before the VM was ready. Status
# 0, printing the report's first line: no frame of farpass, NTB, VFIO, mdev or IOMMU code (an emulator
# fault, e.g. 6.12 taking a #GP at text_poke_early()'s IRET while patching itself at boot, seen
# 2026-11-29); a boot may be retried. Status 1: no crash report. Status 2, printing why: a frame of ours.
l1_boot_crash_verdict() {
	local report
	report=$(l1_log_window "$1" "$2" | l1_report_from "$L1_CRASH_RE") || return 1
	_l1_frame_of_ours "$report" && return 2
	head -n 1 <<<"$report"
}
