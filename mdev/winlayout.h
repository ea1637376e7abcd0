/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * winlayout.h - the DMA window layout, pure logic with no kernel dependency (compiled into farpass.ko
 * and, from the same source, into tests/unit/test_farpass_winlayout).
 *
 * The guest's RAM ranges (fp_ramscan(): conventional memory, low memory below 4 GiB, high memory and
 * DIMMs above) are packed into one contiguous window:
 *  - borrower: the pinned guest pages are mapped at IOVA dma_base + offset in the NTB's DMA domain
 *    (one contiguous IOVA range), and the NTB's inbound translation points at dma_base, size bytes;
 *  - lender: its outbound window reaches that translation, so outbound offset = window offset, and
 *    the device's VFIO container maps IOVA = GPA -> outbound mmap + offset for each slot
 *    (VFIO_IOMMU_MAP_DMA). A device DMA to GPA X goes lender IOMMU -> NTB -> borrower IOMMU -> page.
 * Offsets ascend with the GPAs and keep each GPA's alignment modulo range_align (2 MiB keeps huge
 * IOMMU pages possible on both sides and makes low memory an identity map); the total is rounded up
 * to the NTB's translation alignment.
 */
#ifndef FARPASS_WINLAYOUT_H
#define FARPASS_WINLAYOUT_H

#include "ramscan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FP_WIN_PAGE		FP_RS_PAGE
#define FP_WIN_MAX_SLOTS	FP_RS_MAX_RANGES

struct fp_win_params {
	u64 size;		/* bytes of window this guest may use */
	/* NTB translation alignment (ntb_mw_get_align(): the larger of addr_align and size_align) */
	u64 xlat_align;		/* power of two >= FP_WIN_PAGE */
	u64 range_align;	/* offset == GPA modulo this; power of two >= FP_WIN_PAGE */
};

struct fp_win_slot {
	u64 gpa;		/* guest-physical start (the lender's IOVA) */
	u64 size;		/* bytes */
	u64 offset;		/* in the window */
};

struct fp_win_layout {
	struct fp_win_slot slots[FP_WIN_MAX_SLOTS];	/* ascending in gpa and offset */
	u32 nr;
	u64 size;		/* window bytes used, a multiple of xlat_align */
};

/*
 * Lay out @nr ranges (ascending, disjoint, page aligned, non-empty). 0, or -EINVAL (bad parameters
 * or ranges), -ENOSPC (more than FP_WIN_MAX_SLOTS ranges), -E2BIG (does not fit in params->size;
 * layout->size then says how much would be needed).
 */
int fp_win_build(const struct fp_ram_range *ranges, u32 nr, const struct fp_win_params *params,
		 struct fp_win_layout *layout);

/*
 * GPA -> window offset (the lender's VFIO_IOMMU_MAP_DMA: IOVA = GPA, vaddr = outbound mmap + offset):
 * 0 if [gpa, gpa + len) lies inside one slot, else -ERANGE (not guest RAM, or across a hole). len > 0.
 */
int fp_win_gpa_to_off(const struct fp_win_layout *layout, u64 gpa, u64 len, u64 *offset);

/* Window offset -> GPA (the borrower maps offset -> the pinned page of that GPA); 0 or -ERANGE. */
int fp_win_off_to_gpa(const struct fp_win_layout *layout, u64 offset, u64 len, u64 *gpa);

#ifdef __cplusplus
}
#endif

#endif /* FARPASS_WINLAYOUT_H */
