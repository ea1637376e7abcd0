# shellcheck shell=bash
# Helpers for the check-libvirt rig tests (sourced after rig.sh, ntb-lib.sh, kernel-lib.sh and
# agent-lib.sh): the L1s boot the libvirt root with this checkout's Debian packages installed (rig_up
# --l1-root debroot; vm-images/setup.sh debroot: `apt-get install ./farpass*.deb`, DKMS's build of farpass.ko
# for the L1 kernel) and run the installed files, not the build tree's: farpass-agent and farpassctl from
# the package, the hook and udev rule where it put them, farpass.ko from DKMS (modprobe). The root has no
# systemd, so lv_host_up starts what its units would: udevd (the rule starts defined mdevs when a parent
# registers), farpass.ko, the agent; then libvirtd.
#
#   lv_check_setup                        the root with this checkout's packages (made if missing)
#   lv_fp_load VM                         the NTB modules, then `modprobe farpass` (DKMS's module)
#   lv_expect_packaged VM                 checks that VM runs the packaged files (below)
#   lv_host_up VM AGENT-CONFIG-FRAGMENT   all of the above but libvirtd, in that order (also after rig_boot)
#   lv_libvirtd_up VM [--guests]          libvirtd started (after the hook is installed), answering
#   lv_virsh VM ARGS...                   virsh -c qemu:///system in VM (output and status)
#   lv_mdev_exists VM UUID                the mdev instance is there (sysfs)
#   lv_qemu_log VM FILE                   L0's path of VM's /var/log/libvirt/qemu/FILE
#   lv_domain_xml / lv_hostdev_xml        an L2 guest domain, a farpass hostdev (stock libvirt XML)
#   lv_guest_finish VM DOMAIN             wait until the guest has powered off, print its console
#   lv_step / lv_note / lv_summary        the steps of a flow, timed, with where the data went; the table

LV_VIRSH="virsh -c qemu:///system"
# The agent and farpassctl the L1s run (ag_start, ag_ctl): the package's.
FP_AGENT=/usr/sbin/farpass-agent
FP_CTL=/usr/bin/farpassctl
LV_VERSION=$(dpkg-parsechangelog -l "$FARPASS_TOP/debian/changelog" -S Version)

# A set-up step, here since it is per checkout: it reuses the debs test_deb.sh built from the same tree.
lv_check_setup() { bash "$FARPASS_TOP/vm-images/setup.sh" debroot; }

lv_fp_load() {
	rig_run "$1" -- "set -e
modprobe vfio_iommu_type1
$(fp_ntb_load)
modprobe farpass"
}

# lv_expect_packaged VM: what VM runs is what the packages installed (after lv_fp_load and ag_start):
#  - farpass and farpass-dkms are installed (dpkg), at this tree's version, every file as packaged
#    (dpkg --verify: contents against the packages' md5sums, the hook, a conffile, included);
#  - DKMS built and installed farpass.ko for the running kernel (`dkms status`: on the rig's first VM only,
#    as it took 10 s of TCG: every L1 of a rig boots the same read-only root, rig_up --l1-root debroot),
#    and the farpass.ko loaded is that file: modprobe's (modinfo -n) is DKMS's, and its GNU build id is the
#    loaded module's (/sys/module/farpass/notes);
#  - the running agent is the package's binary (/proc/PID/exe), farpassctl and farpass-agent on PATH
#    (the hook runs farpassctl) are the package's, and the hook directory has the package's hook only.
LV_DKMS_CHECKED=
lv_expect_packaged() {
	local vm=$1
	expect_eq "$vm: farpass and farpass-dkms $LV_VERSION installed" \
		"$(rig_run "$vm" -- "dpkg-query -W -f='\${Package} \${Version} \${Status}\n' farpass farpass-dkms")" \
		"farpass $LV_VERSION install ok installed
farpass-dkms $LV_VERSION install ok installed"
	expect_eq "$vm: their files as packaged (dpkg --verify lists none)" \
		"$(rig_run "$vm" -- "dpkg --verify farpass farpass-dkms 2>&1")" ""
	if [ -z "$LV_DKMS_CHECKED" ]; then
		# dkms 3.0.10 reads the headers' vmlinux's .comment to spot clang; 6.12's is BTF only, so readelf warns.
		expect_eq "$vm: DKMS installed farpass.ko for the running kernel" \
			"$(rig_run "$vm" -- "dkms status -k \$(uname -r) farpass 2>&1 |
grep -vx \"readelf: Warning: Section '.comment' was not dumped because it does not exist\"")" \
			"farpass/$LV_VERSION, $KVER, x86_64: installed"
		LV_DKMS_CHECKED=1
	fi
	# DKMS compresses the module as the kernel's own are (6.12: CONFIG_MODULE_COMPRESS_XZ, farpass.ko.xz).
	local ko=farpass.ko
	! grep -qx CONFIG_MODULE_COMPRESS_XZ=y "$FARPASS_KHEADERS/.config" || ko+=.xz
	# shellcheck disable=SC2016 # expanded in the VM
	expect_eq "$vm: the farpass.ko loaded is DKMS's (modprobe's file, its build id the loaded module's)" \
		"$(rig_run "$vm" -- 'f=$(modinfo -n farpass)
file=$(case $f in *.xz) xz -dc "$f" >/tmp/farpass.ko && readelf -n /tmp/farpass.ko ;; *) readelf -n "$f" ;; esac |
	sed -n "s/.*Build ID: //p")
loaded=$(od -An -tx1 -v -j16 /sys/module/farpass/notes/.note.gnu.build-id | tr -d " \n")
[ -n "$file" ] && [ "$file" = "$loaded" ] && echo "$f: same build id" || echo "$f: build id $file, loaded $loaded"')" \
		"/lib/modules/$KVER/updates/dkms/$ko: same build id"
	expect_eq "$vm: the agent runs the package's binary" \
		"$(rig_run "$vm" -- "readlink /proc/\$(cat $RIGDIR/$vm/agent.pid)/exe")" "$FP_AGENT"
	expect_eq "$vm: farpassctl and farpass-agent on PATH are the package's; the hook directory has its hook only" \
		"$(rig_run "$vm" -- "command -v farpassctl farpass-agent; ls /etc/libvirt/hooks/qemu.d")" \
		"$FP_CTL
$FP_AGENT
farpass"
}

# The rig's L1 root is a tmpfs overlay: /etc/mdevctl.d (mdevctl's and libvirt's persistent mdev
# definitions) is kept in $RIGDIR/VM/mdevctl.d, bind-mounted at each boot, as a disk would keep it.
_lv_persistent_etc() {
	local vm=$1
	mkdir -p "$RIGDIR/$vm/mdevctl.d"
	# Seeded with the package's own content (scripts.d/callouts, which mdevctl requires).
	rig_run "$vm" -- "mountpoint -q /etc/mdevctl.d && exit 0
cp -an /etc/mdevctl.d/. $RIGDIR/$vm/mdevctl.d/ && mount --bind $RIGDIR/$vm/mdevctl.d /etc/mdevctl.d"
}

# lv_qemu_log VM FILE: where L0 reads VM's /var/log/libvirt/qemu/FILE (QEMU's logs, guests' consoles):
# lv_libvirtd_up --guests bind-mounts VM's share there, so a path in it is valid on every borrower.
lv_qemu_log() { echo "$RIGDIR/$1/libvirt-qemu/$2"; }

lv_host_up() {
	local vm=$1 t0=$SECONDS
	expect "$vm: /etc/mdevctl.d persists across reboots" _lv_persistent_etc "$vm"
	# settle waits as long for udevd to answer its ping as for the queue: once, beside the other lane's
	# rig, 30 s was not enough for the ping ("Failed to wait for daemon to reply").
	expect "$vm: udevd runs" rig_run "$vm" -- "/lib/systemd/systemd-udevd --daemon && udevadm trigger --action=add && udevadm settle -t 120"
	expect "$vm: farpass.ko loads (modprobe)" lv_fp_load "$vm"
	ag_config "$vm" "$2"
	expect "$vm: farpass-agent starts" ag_start "$vm"
	lv_expect_packaged "$vm"
	echo "# $vm: host up in $((SECONDS - t0)) s"
}

# lv_libvirtd_up VM [--guests]: --guests for running L2 guests, with the rig's own settings: QEMU runs as
# root, as the guests' files (kernel, console, script) are on 9p shares where the L1's libvirt-qemu user
# may not create or chown; /var/log/libvirt/qemu is read on L0 (lv_qemu_log); libvirtd listens on TCP
# without auth on the management LAN (a closed network of the rig) for `virsh migrate` between borrowers.
lv_libvirtd_up() {
	local vm=$1 t0=$SECONDS listen=
	if [ "${2:-}" = --guests ]; then
		listen=--listen
		expect "$vm: settings for guests (QEMU's user, logs on L0, TCP without auth)" rig_run "$vm" -- "set -e
mkdir -p $(lv_qemu_log "$vm" "") && mount --bind $(lv_qemu_log "$vm" "") /var/log/libvirt/qemu
printf 'user = \"root\"\ngroup = \"root\"\n' >>/etc/libvirt/qemu.conf
printf 'listen_tls = 0\nlisten_tcp = 1\nauth_tcp = \"none\"\n' >>/etc/libvirt/libvirtd.conf"
	fi
	# libvirtd probes each QEMU binary (x86_64 and i386: 17-19 s of its start in an idle L1) unless its
	# capabilities cache has them (5 s then). The rig's L1s boot the same root, and libvirt checks an
	# entry against the binary and itself: VM's cache, kept in its directory across reboots, starts with
	# the entries the rig's other VMs made.
	local caps=$RIGDIR/$vm/libvirt-caps f
	mkdir -p "$caps"
	for f in "$RIGDIR"/*/libvirt-caps/*.xml; do
		[ ! -e "$f" ] || [ -e "$caps/${f##*/}" ] || cp -p "$f" "$caps/"
	done
	expect "$vm: libvirt's QEMU capabilities cache is in its rig directory" rig_run "$vm" -- "mkdir -p /var/cache/libvirt/qemu/capabilities &&
mount --bind $caps /var/cache/libvirt/qemu/capabilities"
	# It answers in 11-41 s. Twice under load it did not answer within this step's bound, with no kernel
	# hang and no line of this script's output (cause unknown): each step now says when it ends, each virsh
	# is killed 5 s after its 20 s, and after 70 s the daemon's threads are shown and it is started again;
	# if the step itself times out, libvirt's and virsh's processes are listed with their kernel stacks.
	# libvirtd's warnings go to the VM's rig dir.
	if ! expect "$vm: libvirtd starts and answers" rig_run "$vm" --timeout 210 -- "for try in 1 2; do
	LIBVIRT_LOG_OUTPUTS='3:file:$(rig_vm_dir "$vm")/libvirtd.log' libvirtd -d $listen || exit 1
	echo \"try \$try: libvirtd -d returned at \$SECONDS s\"
	end=\$((SECONDS + 70))
	while [ \$SECONDS -lt \$end ]; do
		err=\$(timeout -k 5 20 $LV_VIRSH version 2>&1 >/dev/null) && exit 0
		sleep 0.5
	done
	echo \"libvirtd did not answer in 70 s; virsh's last error: \${err:-timed out after 20 s}\"
	if pid=\$(pgrep -xo libvirtd); then
		echo 'its threads (name, wait channel, kernel stack):'
		for t in /proc/\$pid/task/*; do echo \"\$(cat \$t/comm) \$(cat \$t/wchan)\"; head -n 4 \$t/stack; done
	else
		echo 'libvirtd is not running'
	fi
	pkill -9 -x libvirtd; sleep 2
done; exit 1"; then
		rig_run "$vm" --timeout 30 -- "for p in \$(pgrep 'libvirtd|virsh|qemu|timeout'); do
	echo \"\$p \$(ps -o stat=,etimes=,wchan:32=,args= -p \$p)\"; head -n 6 /proc/\$p/stack
done" || true
		return 1
	fi
	echo "# $vm: libvirtd up in $((SECONDS - t0)) s"
}

lv_virsh() {
	local vm=$1
	shift
	rig_run "$vm" --timeout 120 -- "$LV_VIRSH $*"
}

# lv_expect_type VM [PCI]: a check that VM's agent announced the lender's device PCI (lv_type), whose
# type it leaves in LV_TYPE; failing, why follows its FAIL line.
lv_expect_type() {
	if LV_TYPE=$(lv_type "$@" 2>"$RIGDIR/lv_type.err"); then
		printf 'ok   %s: lender %s announced, mdev type %s\n' "$1" "${2:-$LENDER_NVME}" "$LV_TYPE"
	else
		printf 'FAIL %s: lender %s announced, with a slot in its status\n' "$1" "${2:-$LENDER_NVME}"
		cat "$RIGDIR/lv_type.err"
		return 1
	fi
}

lv_mdev_exists() { rig_run "$1" -- "test -e /sys/bus/mdev/devices/$2"; }

# lv_type VM [PCI]: the farpass type of the lender's device PCI (default its NVMe) on VM's NTB (its
# lender's slot), once announced (waits up to 60 s). Fails saying why on stderr: not announced (the
# agent's last warnings follow), or no slot for it in the agent's status (which follows).
lv_type() {
	local vm=$1 pci=${2:-$LENDER_NVME} status slot
	if ! ag_wait_log "$vm" 60 "announced lender $pci"; then
		echo "lv_type: $vm's agent did not announce lender $pci within 60 s; its last warnings and errors:" >&2
		ag_log "$vm" | grep -E '^<[0-4]>' | tail -n 5 >&2
		return 1
	fi
	status=$(ag_ctl "$vm" --json status 2>&1) || true
	slot=$(jq -r ".remote_devices[] | select(.pci == \"$pci\") | .slot" <<<"$status" 2>/dev/null) || true
	if ! [[ $slot =~ ^[0-9]+$ ]]; then
		echo "lv_type: $vm's agent announced lender $pci, but its status gives no slot for it:" >&2
		head -c 2000 <<<"$status" >&2
		return 1
	fi
	echo "ntb_hw_epf-farpass-lender-$slot"
}

# lv_hostdev_xml UUID: the <hostdev> of an mdev (e.g. the farpass instance of a remote device).
lv_hostdev_xml() {
	printf '%s\n' "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>" \
		"  <source><address uuid='$1'/></source>" "</hostdev>"
}

# lv_domain_xml NAME MEM-MiB SCRIPT CONSOLE [HOSTDEV-UUID...]: a q35 L2 guest booting the rig's L2 kernel
# and initramfs ($E2E_L2_INITRD, e2e-lib.sh) directly, which runs the file SCRIPT (passed by fw_cfg, as
# e2e_l2_start does) and powers off (ACPI); its console goes to the file CONSOLE, a path in the L1 (in
# /var/log/libvirt/qemu: lv_qemu_log); two PCIe root ports (no USB) for its devices, hot-added ones included.
# It boots as e2e_l2_start's guests do (E2E_L2_MACHINE, E2E_L2_CMDLINE) but for q35's SATA and SMBus,
# which libvirt always adds, and the PS/2 controller, which libvirt 9.0 cannot leave out: the kernel
# leaves its ports alone instead (i8042.nokbd, i8042.noaux: no keyboard or mouse probing).
# Each HOSTDEV-UUID's mdev is one of its devices, in that order.
lv_domain_xml() {
	local name=$1 mem=$2 script=$3 console=$4 uuid
	shift 4
	cat <<EOF
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>$mem</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>$FARPASS_L2_KERNEL</kernel>
    <initrd>$E2E_L2_INITRD</initrd>
    <cmdline>$E2E_L2_CMDLINE i8042.nokbd i8042.noaux</cmdline>
  </os>
  <sysinfo type='fwcfg'>
    <entry name='opt/farpass/script' file='$script'/>
  </sysinfo>
  <features><acpi/><smm state='off'/><vmport state='off'/></features>
  <on_reboot>destroy</on_reboot>
  <devices>
    <serial type='file'><source path='$console'/><target port='0'/></serial>
    <controller type='pci' index='0' model='pcie-root'/>
    <controller type='pci' model='pcie-root-port'/>
    <controller type='pci' model='pcie-root-port'/>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
$(for uuid in "$@"; do lv_hostdev_xml "$uuid"; done | sed 's/^/    /')
  </devices>
</domain>
EOF
}

# lv_guest_finish VM DOMAIN: wait (up to E2E_L2_TIMEOUT s) until the domain is shut off; prints the
# guest's console ($E2E_L2_LOG) and fails if it did not stop. Until the guest's init says L2-DONE (just
# before it powers off) or its kernel panics, the wait reads the console on L0 and asks virsh only every
# 30 s (a guest that stopped without a word): `virsh domstate` every 2 s took the L1's one TCG thread
# from the guest (virsh and its rig command about 45% in the L1's top) and cost its fio about a third of
# its rate (docs/rig.md).
lv_guest_finish() {
	local vm=$1 t0=$SECONDS n=0
	until grep -qsE '^L2-DONE|Kernel panic' "$E2E_L2_LOG" || ((SECONDS - t0 >= E2E_L2_TIMEOUT)); do
		n=$((n + 1))
		((n % 30)) || [ "$(lv_virsh "$vm" domstate "$2" 2>/dev/null)" != "shut off" ] || break
		sleep 1
	done
	until [ "$(lv_virsh "$vm" domstate "$2" 2>/dev/null)" = "shut off" ]; do
		((SECONDS - t0 < E2E_L2_TIMEOUT)) || { echo "$vm: $2 still runs after $E2E_L2_TIMEOUT s" >&2; return 1; }
		sleep 2
	done
	tr -d '\r' <"$E2E_L2_LOG"
}

# lv_step WHAT: a step of a flow begins (printed); lv_note TEXT: where its data went; lv_summary: the
# table of the steps, their notes and durations.
LV_STEPS=()
lv_step() {
	_lv_step_end
	LV_STEP=$1 LV_STEP_T0=$SECONDS LV_NOTE=-
	printf '\n### %s\n' "$1"
}
lv_note() { LV_NOTE=$1; }
_lv_step_end() {
	[ -z "${LV_STEP:-}" ] || LV_STEPS+=("$LV_STEP|$LV_NOTE|$((SECONDS - LV_STEP_T0)) s")
	LV_STEP=
}
lv_summary() {
	_lv_step_end
	printf '\n### Summary\n'
	{
		echo "step|data|time"
		printf '%s\n' "${LV_STEPS[@]}"
	} | column -t -s '|' -o ' | '
}
