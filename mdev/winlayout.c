// SPDX-License-Identifier: GPL-2.0-only
/*
 * winlayout.c - the DMA window layout; see winlayout.h. No kernel headers beyond types and errno
 * values, so the same file compiles in userspace for the unit tests.
 */
#ifdef __KERNEL__
#include <linux/errno.h>
#include <linux/kernel.h>
#else
#include <errno.h>
#endif

#include "winlayout.h"

static bool fp_win_pow2(u64 x)
{
	return x && !(x & (x - 1));
}

int fp_win_build(const struct fp_ram_range *ranges, u32 nr, const struct fp_win_params *params,
		 struct fp_win_layout *layout)
{
	u64 cursor = 0, prev_end = 0, mask;
	u32 i;

	layout->nr = 0;
	layout->size = 0;
	if (!fp_win_pow2(params->xlat_align) || params->xlat_align < FP_WIN_PAGE ||
	    !fp_win_pow2(params->range_align) || params->range_align < FP_WIN_PAGE)
		return -EINVAL;
	if (nr > FP_WIN_MAX_SLOTS)
		return -ENOSPC;
	mask = params->range_align - 1;
	for (i = 0; i < nr; i++) {
		const struct fp_ram_range *r = &ranges[i];
		struct fp_win_slot *slot = &layout->slots[i];

		if (!r->size || (r->start | r->size) & (FP_WIN_PAGE - 1) ||
		    r->start + r->size < r->start || (i && r->start < prev_end))
			return -EINVAL;
		slot->gpa = r->start;
		slot->size = r->size;
		slot->offset = cursor + ((r->start - cursor) & mask);
		if (slot->offset < cursor || slot->offset + r->size < slot->offset)
			return -E2BIG;
		cursor = slot->offset + r->size;
		prev_end = r->start + r->size;
	}
	layout->nr = nr;
	if (cursor > ~0ull - params->xlat_align)
		return -E2BIG;
	layout->size = (cursor + params->xlat_align - 1) & ~(params->xlat_align - 1);
	return layout->size > params->size ? -E2BIG : 0;
}

int fp_win_gpa_to_off(const struct fp_win_layout *layout, u64 gpa, u64 len, u64 *offset)
{
	u32 i;

	for (i = 0; i < layout->nr; i++) {
		const struct fp_win_slot *s = &layout->slots[i];

		if (gpa >= s->gpa && len && len <= s->size && gpa - s->gpa <= s->size - len) {
			*offset = s->offset + (gpa - s->gpa);
			return 0;
		}
	}
	return -ERANGE;
}

int fp_win_off_to_gpa(const struct fp_win_layout *layout, u64 offset, u64 len, u64 *gpa)
{
	u32 i;

	for (i = 0; i < layout->nr; i++) {
		const struct fp_win_slot *s = &layout->slots[i];

		if (offset >= s->offset && len && len <= s->size && offset - s->offset <= s->size - len) {
			*gpa = s->gpa + (offset - s->offset);
			return 0;
		}
	}
	return -ERANGE;
}
