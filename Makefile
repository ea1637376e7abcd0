# farpass: thin entry points. Everything real lives in meson (userspace), Kbuild (kernel) and the
# rig scripts under vm-images/ and tests/.
SHELL := /bin/bash
export FARPASS_CACHE ?= /var/cache/farpass
BUILD := build

.PHONY: all setup build demo check check-unit check-rig check-kernel check-agent check-libvirt check-e2e \
	check-reliability check-other-kernel print-check-suites soak bench deb clean

all: build

# Debian packages, sources, patched QEMU, NTB modules, L1 initramfs, L2 guest kernel, L1 libvirt root,
# for both L1 kernel series (idempotent, cached by version: only the first run builds; ~20 min on a fresh
# 2-core machine).
setup:
	. vm-images/env.sh && for k in $$FARPASS_KERNEL_DEFAULT $$FARPASS_KERNEL_OTHER; do \
		FARPASS_KERNEL=$$k bash vm-images/setup.sh all || exit; done

# meson compiles through ccache (found at `meson setup`): a fresh clone's build of sources an earlier build
# compiled takes its objects from the cache beside the rig's. Paths hash relative to the checkout and
# without its directory, so every clone shares the entries.
build deb: export CCACHE_DIR := $(FARPASS_CACHE)/ccache
build deb: export CCACHE_NOHASHDIR := 1
build: export CCACHE_BASEDIR := $(CURDIR)
build: setup
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD)
	meson compile -C $(BUILD)
	. vm-images/env.sh && meson compile -C $(BUILD) \
		$$(for k in $$FARPASS_KERNEL_DEFAULT $$FARPASS_KERNEL_OTHER; do echo mdev/farpass-$$k.ko tests/kernel/fp_probe_fault-$$k.ko; done)

# Every suite on the default L1 kernel, of the e2e suite only the tests of CHECK_E2E (several devices of
# two lenders in one guest; fio through the NVMe alone, then with the agents restarted under it), and,
# on the other (@other), the kernel tests that call each of mdev/compat.h's shims there: the vfio_device_ops
# shim (test_load_unload), pinning, hugetlb and IOMMU maps (test_dma_window), a window's mmap and
# a BAR_MAP's IOMMU map (test_bar_window), eventfd signals (test_intx: the VFIO user's trigger and the
# lender's unmask eventfd). The rest is in `make soak`, for CI's 90 minutes. One rig at a time: two at
# once on two cores took longer than one after the other (docs/rig.md).
CHECK_E2E := test_remote_nic_and_nvme test_remote_nvme_fio
SOAK_E2E := $(filter-out $(CHECK_E2E),$(basename $(notdir $(wildcard tests/e2e/test_*.sh))))
CHECK_OTHER_KERNEL := test_load_unload test_dma_window test_bar_window test_intx
CHECK_SUITES := unit rig kernel $(patsubst %,kernel/%@other,$(CHECK_OTHER_KERNEL)) agent libvirt \
	$(addprefix e2e/,$(CHECK_E2E)) reliability
check: build
	tests/run-suites.sh $(CHECK_SUITES)

# What make check runs, for make bench's table of its suites' times.
print-check-suites:
	@echo $(CHECK_SUITES)

check-unit: build
	tests/run-suites.sh unit

check-rig: build
	tests/run-suites.sh rig

# farpass.ko in the rig's L1 hosts, driven by tests/kernel/farpass-client. FARPASS_KERNEL=6.1|6.12 picks
# the L1 hosts' kernel for the set-up, the build and the tests (default 6.12; docs/rig.md).
check-kernel: build
	tests/run-suites.sh kernel

# farpass-agent and farpassctl in the rig: lend, list, announce, authentication, leases (tests/agent/).
check-agent: build
	tests/run-suites.sh agent

# libvirt in the rig's L1 libvirt root: mdevctl and virsh discovery, persistent mdevs, the hook (tests/libvirt/).
check-libvirt: build
	tests/run-suites.sh libvirt

# L2 guests in a borrower L1 run fio on an NVMe passed through with stock QEMU; what they wrote is checked
# in the device's backing file on L0 (tests/e2e/).
check-e2e: build
	tests/run-suites.sh e2e

# check-kernel and check-e2e on the other L1 kernel series (FARPASS_KERNEL_OTHER, vm-images/env.sh).
check-other-kernel: build
	. vm-images/env.sh && tests/run-suites.sh kernel@$$FARPASS_KERNEL_OTHER e2e@$$FARPASS_KERNEL_OTHER

# Faults while an L2 guest runs fio with verify on the remote NVMe: link outages shorter and longer than the
# lease, its borrower host killed, the lender's device reset, hot-plug churn (four guests on one link: make
# soak); every block fio completed checked, resources back to baseline, a summary table (tests/reliability/).
check-reliability: build
	tests/run-suites.sh reliability

# The long variants: check-reliability with 100 hot-plug cycles, four guests on one link, 100 reboots of a guest, the e1000e on
# plain MSI, the rig's local vfio-pci baseline of the e2e suite and the L1 kernels' code patching (tests/soak/), the e2e tests
# make check leaves out, the whole kernel and e2e suites on the other L1 kernel series, the kernel fuzz 10 min per seed.
soak: build
	REL_CHURN_CYCLES=100 tests/run-suites.sh reliability soak $(addprefix e2e/,$(SOAK_E2E)) kernel@other e2e@other
	FP_FUZZ_MS=600000 bash tests/kernel/test_fuzz.sh

bench: build
	bash tests/bench/run.sh

demo: build
	bash tests/demo.sh

# Debian packages farpass and farpass-dkms (debian/), built by dpkg-buildpackage from a copy of the
# tree's files (tracked and new, not ignored) and checked by lintian: $(BUILD)/deb/*.deb. Through ccache
# too: dpkg-buildflags' -ffile-prefix-map makes the objects the same wherever the copy is, so the option,
# which names the copy's path, is left out of the hash.
deb: export CCACHE_BASEDIR := $(abspath $(BUILD))/deb/farpass
deb: export CCACHE_IGNOREOPTIONS := -ffile-prefix-map=*
deb:
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb/farpass
	git ls-files -z --cached --others --exclude-standard | xargs -0 tar -c | tar -x -C $(BUILD)/deb/farpass
	cd $(BUILD)/deb/farpass && dpkg-buildpackage --build=binary --no-sign --jobs-try=auto
	lintian --fail-on error,warning $(BUILD)/deb/*.changes

clean:
	rm -rf $(BUILD) rig-out
