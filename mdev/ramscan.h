/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * ramscan.h - guest RAM discovery by probing, pure logic with no kernel dependency (compiled into
 * farpass.ko and, from the same source, into tests/unit/test_farpass_ramscan).
 *
 * Without KVM's memslots the borrower only knows which guest IOVAs (= guest-physical addresses) QEMU
 * mapped with VFIO_IOMMU_MAP_DMA by trying to pin them. fp_ramscan() finds the guest's RAM ranges
 * with O(ranges x log2(size in pages)) probes, never O(pages): from each known candidate start an
 * exponential search (1, 2, 4, ... pages) brackets the range's end, a binary search pins it down to
 * the page. Ends need no alignment; the costs are ~2 log2(pages) probes per range.
 *
 * Assumptions (x86 guest-physical layout, QEMU pc/q35; see docs/mdev.md):
 *  - a range has no holes inside (checked anyway: the caller pins every page of what we report);
 *  - segments are never crossed by one search: [0, 640 KiB) conventional memory, [768 KiB, 1 MiB)
 *    the PAM shadow area (RAM once the firmware opened it, else read-only ROM, which a write-pinning
 *    probe reports as a hole), [1 MiB, 4 GiB) low memory, [4 GiB, limit) high memory and DIMMs.
 *    640-768 KiB (VGA/SMRAM window) is never scanned. Ranges touching at a segment boundary are
 *    merged (e.g. a RAM PAM area continues low memory from 768 KiB);
 *  - below 4 GiB a range starts only at its segment's start (the PCI hole follows low memory; the
 *    BIOS ROM below 4 GiB is read-only, so a hole);
 *  - from 4 GiB: high memory starts at 4 GiB; hotplugged DIMMs sit above it (QEMU: first fit from
 *    round_up(4 GiB + high, 1 GiB)). A DIMM is found if it covers a point of the FP_RS_HOLE_GRAN
 *    (128 MiB) grid within FP_RS_HOLE_STEPS grid points after the previous range (or 4 GiB): Linux
 *    onlines x86 memory in 128 MiB blocks, so a DIMM that covers no 128 MiB-aligned block is of no
 *    use to a Linux guest. Each gap costs up to FP_RS_HOLE_STEPS probes, each DIMM ~15 more to find
 *    its exact start.
 */
#ifndef FARPASS_RAMSCAN_H
#define FARPASS_RAMSCAN_H

#include "portable.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP_RS_PAGE_SHIFT	12
#define FP_RS_PAGE		(1ull << FP_RS_PAGE_SHIFT)
#define FP_RS_VGA_START		0xa0000ull		/* 640 KiB: end of conventional memory */
#define FP_RS_PAM_START		0xc0000ull		/* 768 KiB: PAM shadow area (RAM or ROM) */
#define FP_RS_LOW_START		0x100000ull		/* 1 MiB */
#define FP_RS_HIGH_START	0x100000000ull		/* 4 GiB */
#define FP_RS_HOLE_GRAN		(128ull << 20)		/* hotplug scan grid above 4 GiB */
#define FP_RS_HOLE_STEPS	32			/* grid points tried per gap (4 GiB) */
#define FP_RS_MAX_RANGES	8

/*
 * Is every page of [iova, iova + npages * FP_RS_PAGE) pinnable for DMA (read and write)? > 0 yes,
 * 0 no, < 0 an error that stops the scan (returned by fp_ramscan()). fp_ramscan() asks for one page
 * at a time (the kernel wrapper pins and unpins it with vfio_pin_pages()); npages is there for the
 * caller's own checks. A probe must have no lasting effect.
 */
typedef int (*fp_probe_fn)(void *ctx, u64 iova, u64 npages);

struct fp_ram_range {
	u64 start;	/* guest-physical = IOVA, page aligned */
	u64 size;	/* bytes, a multiple of FP_RS_PAGE, > 0 */
};

struct fp_ramscan {
	/* in */
	fp_probe_fn probe;
	void *ctx;
	u64 limit;		/* first IOVA not scanned (e.g. 1 << guest phys-bits); > 4 GiB */
	/* out */
	struct fp_ram_range ranges[FP_RS_MAX_RANGES];	/* ascending, disjoint, not adjacent */
	u32 nr_ranges;
	u64 probes;		/* probe calls made */
};

/*
 * Find the guest's RAM ranges. 0 on success (nr_ranges may be 0: no RAM mapped yet), -EINVAL for a
 * bad limit, -E2BIG if there are more than FP_RS_MAX_RANGES ranges, or a probe's error.
 */
int fp_ramscan(struct fp_ramscan *s);

/*
 * The first pinnable range [*rs, *re) in [from, end) (page aligned): 1 found, 0 none, < 0 a probe's
 * error. No segment rules: for re-pinning part of a known range after the VFIO user mapped it again.
 * From a hole an exponential search finds the next pinnable page (a pinnable island shorter than the
 * hole before it can be missed), binary searches its exact start and end. Uses s->probe, s->ctx and
 * counts s->probes; the ranges array is left alone.
 */
int fp_ramscan_next(struct fp_ramscan *s, u64 from, u64 end, u64 *rs, u64 *re);

/* Total bytes of the ranges found. */
u64 fp_ramscan_total(const struct fp_ramscan *s);

#ifdef __cplusplus
}
#endif

#endif /* FARPASS_RAMSCAN_H */
