// SPDX-License-Identifier: GPL-2.0-only
/*
 * ramscan.c - guest RAM discovery by probing; see ramscan.h. No kernel headers beyond types and
 * errno values, so the same file compiles in userspace for the unit tests.
 */
#ifdef __KERNEL__
#include <linux/errno.h>
#include <linux/kernel.h>
#else
#include <errno.h>
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#endif

#include "ramscan.h"

struct fp_rs_segment {
	u64 start;
	u64 end;	/* 0: the scan's limit */
	bool hotplug;	/* scan the gaps for DIMMs */
};

static const struct fp_rs_segment fp_rs_segments[] = {
	{ 0,			FP_RS_VGA_START,	false },
	{ FP_RS_PAM_START,	FP_RS_LOW_START,	false },
	{ FP_RS_LOW_START,	FP_RS_HIGH_START,	false },
	{ FP_RS_HIGH_START,	0,			true },
};

/* > 0 if the page at @iova is pinnable, 0 if not, < 0 error. */
static int fp_rs_probe(struct fp_ramscan *s, u64 iova)
{
	s->probes++;
	return s->probe(s->ctx, iova, 1);
}

/* Middle page of [lo, hi), both page aligned, lo < hi. */
static u64 fp_rs_mid(u64 lo, u64 hi)
{
	return lo + (((hi - lo) >> FP_RS_PAGE_SHIFT) / 2 << FP_RS_PAGE_SHIFT);
}

/*
 * [start, good) is pinnable; find the end of the range, at most @seg_end: exponential steps from
 * @good, then a binary search between the last pinnable and the first unpinnable page seen.
 */
static int fp_rs_end(struct fp_ramscan *s, u64 good, u64 seg_end, u64 *end)
{
	u64 lo = good, hi = seg_end, step = FP_RS_PAGE;
	int r;

	/* The end is in [lo, hi]; pages in [lo, hi) are unknown. */
	while (hi - lo > step) {
		u64 p = lo + step - FP_RS_PAGE;

		r = fp_rs_probe(s, p);
		if (r < 0)
			return r;
		if (!r) {
			hi = p;
			break;
		}
		lo = p + FP_RS_PAGE;
		step <<= 1;
	}
	while (lo < hi) {
		u64 mid = fp_rs_mid(lo, hi);

		r = fp_rs_probe(s, mid);
		if (r < 0)
			return r;
		if (r)
			lo = mid + FP_RS_PAGE;
		else
			hi = mid;
	}
	*end = lo;
	return 0;
}

/* Page @bad is not pinnable, page @good > @bad is: find the first pinnable page in (bad, good]. */
static int fp_rs_start(struct fp_ramscan *s, u64 bad, u64 good, u64 *start)
{
	u64 lo = bad + FP_RS_PAGE, hi = good;
	int r;

	while (lo < hi) {
		u64 mid = fp_rs_mid(lo, hi);

		r = fp_rs_probe(s, mid);
		if (r < 0)
			return r;
		if (r)
			hi = mid;
		else
			lo = mid + FP_RS_PAGE;
	}
	*start = lo;
	return 0;
}

static int fp_rs_add(struct fp_ramscan *s, u64 start, u64 end)
{
	struct fp_ram_range *last = s->nr_ranges ? &s->ranges[s->nr_ranges - 1] : NULL;

	if (last && last->start + last->size == start) {
		last->size += end - start;
		return 0;
	}
	if (s->nr_ranges == FP_RS_MAX_RANGES)
		return -E2BIG;
	s->ranges[s->nr_ranges].start = start;
	s->ranges[s->nr_ranges].size = end - start;
	s->nr_ranges++;
	return 0;
}

/* A range starts at @start and [start, good) is pinnable: find its end, record it. */
static int fp_rs_range(struct fp_ramscan *s, u64 start, u64 good, u64 seg_end, u64 *end)
{
	int r = fp_rs_end(s, good, seg_end, end);

	return r ? r : fp_rs_add(s, start, *end);
}

/* Page @bad is not pinnable: look for DIMMs on the hotplug grid after it, up to @seg_end. */
static int fp_rs_hotplug(struct fp_ramscan *s, u64 bad, u64 seg_end)
{
	u64 p = (bad & ~(FP_RS_HOLE_GRAN - 1)) + FP_RS_HOLE_GRAN;
	u32 steps = 0;
	int r;

	while (steps < FP_RS_HOLE_STEPS && p < seg_end) {
		u64 start, end;

		r = fp_rs_probe(s, p);
		if (r < 0)
			return r;
		if (!r) {
			bad = p;
			p += FP_RS_HOLE_GRAN;
			steps++;
			continue;
		}
		r = fp_rs_start(s, bad, p, &start);
		if (!r)
			r = fp_rs_range(s, start, p + FP_RS_PAGE, seg_end, &end);
		if (r)
			return r;
		bad = end;
		p = (bad & ~(FP_RS_HOLE_GRAN - 1)) + FP_RS_HOLE_GRAN;
		steps = 0;
	}
	return 0;
}

int fp_ramscan(struct fp_ramscan *s)
{
	size_t i;
	int r;

	s->nr_ranges = 0;
	s->probes = 0;
	if (s->limit <= FP_RS_HIGH_START || s->limit & (FP_RS_PAGE - 1))
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(fp_rs_segments); i++) {
		const struct fp_rs_segment *seg = &fp_rs_segments[i];
		u64 seg_end = seg->end ? seg->end : s->limit;
		u64 bad = seg->start;

		r = fp_rs_probe(s, seg->start);
		if (r < 0)
			return r;
		if (r) {
			r = fp_rs_range(s, seg->start, seg->start + FP_RS_PAGE, seg_end, &bad);
			if (r)
				return r;
		}
		if (seg->hotplug) {
			r = fp_rs_hotplug(s, bad, seg_end);
			if (r)
				return r;
		}
	}
	return 0;
}

int fp_ramscan_next(struct fp_ramscan *s, u64 from, u64 end, u64 *rs, u64 *re)
{
	u64 bad, q, step = FP_RS_PAGE;
	int r;

	if (from >= end)
		return 0;
	r = fp_rs_probe(s, from);
	if (r < 0)
		return r;
	if (!r) {
		/* Gallop from the hole; the last step stops at the last page. */
		for (bad = from;; bad = q, step <<= 1) {
			q = end - bad > step ? bad + step : end - FP_RS_PAGE;
			if (q == bad)
				return 0;
			r = fp_rs_probe(s, q);
			if (r < 0)
				return r;
			if (r)
				break;
			if (q == end - FP_RS_PAGE)
				return 0;
		}
		r = fp_rs_start(s, bad, q, &from);
		if (r)
			return r;
	}
	*rs = from;
	r = fp_rs_end(s, from + FP_RS_PAGE, end, re);
	return r ? r : 1;
}

u64 fp_ramscan_total(const struct fp_ramscan *s)
{
	u64 total = 0;
	u32 i;

	for (i = 0; i < s->nr_ranges; i++)
		total += s->ranges[i].size;
	return total;
}
