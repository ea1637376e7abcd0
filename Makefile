# farpass: thin entry points. Everything real lives in meson (userspace), Kbuild (kernel) and the
# rig scripts under vm-images/ and tests/.
SHELL := /bin/bash
export FARPASS_CACHE ?= /var/cache/farpass
BUILD := build

.PHONY: all setup setup-all build demo check check-unit check-rig check-kernel bench clean

all: build

# Debian packages, sources, patched QEMU, NTB modules, L1 images (idempotent, cached by version).
setup:
	bash vm-images/setup.sh rig

# Also the L2 guest kernel and the L1 libvirt root.
setup-all:
	bash vm-images/setup.sh all

build: setup
	@[ -f $(BUILD)/build.ninja ] || meson setup $(BUILD)
	meson compile -C $(BUILD)

check: build
	tests/run-suites.sh unit rig kernel

check-unit: build
	tests/run-suites.sh unit

check-rig: build
	tests/run-suites.sh rig

# farpass.ko in the rig's L1 hosts, driven by tests/kernel/farpass-client.
check-kernel: build
	tests/run-suites.sh kernel

bench: build
	bash tests/bench/run.sh

demo: build
	bash tests/demo.sh

clean:
	rm -rf $(BUILD) rig-out
