// farpass.ko's guest RAM discovery by probing (mdev/ramscan.c, compiled from the same source as the
// module), against synthetic guest layouts modelled on QEMU 7.2's q35 machine.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "ramscan.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <vector>

namespace {

constexpr u64 KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

struct Range {
	u64 start, end;
	bool operator==(const Range &o) const { return start == o.start && end == o.end; }
};

doctest::String toString(const Range &r)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "[%#llx, %#llx)", (unsigned long long)r.start, (unsigned long long)r.end);
	return buf;
}

// The guest as VFIO sees it: the IOVA ranges QEMU mapped read-write (read-only ROM is left out: a
// probe pins for write, so ROM reads as a hole).
struct Guest {
	std::vector<Range> rw;
	int fail_at_probe = -1;		// make the n-th probe fail with -EFAULT
	int calls = 0;

	static int probe(void *ctx, u64 iova, u64 npages)
	{
		auto *g = static_cast<Guest *>(ctx);
		if (g->calls++ == g->fail_at_probe)
			return -EFAULT;
		REQUIRE(iova % FP_RS_PAGE == 0);
		for (const Range &r : g->rw)
			if (iova >= r.start && iova + npages * FP_RS_PAGE <= r.end)
				return 1;
		return 0;
	}
};

// QEMU 7.2 hw/i386/pc_q35.c: "lowmem" is 2 GiB if the guest has >= 2.75 GiB (0xb0000000), else
// 2.75 GiB; RAM below 4 GiB is min(ram, lowmem), the rest starts at 4 GiB. Below 1 MiB: conventional
// memory up to 640 KiB, the VGA/SMRAM window, then the PAM area (RAM once SeaBIOS opened it for
// shadowing, read-only ROM otherwise). DIMMs live in device memory from round_up(4 GiB + high, 1 GiB).
Guest q35(u64 ram, bool pam_rw, std::vector<Range> dimms = {})
{
	u64 lowmem = ram >= 0xb0000000ull ? 0x80000000ull : 0xb0000000ull;
	u64 below = ram < lowmem ? ram : lowmem, above = ram - below;
	Guest g;
	g.rw.push_back({0, 640 * KiB});
	if (pam_rw)
		g.rw.push_back({768 * KiB, 1 * MiB});
	g.rw.push_back({1 * MiB, below});
	if (above)
		g.rw.push_back({4 * GiB, 4 * GiB + above});
	for (const Range &d : dimms)
		g.rw.push_back(d);
	return g;
}

u64 device_memory_base(u64 ram)
{
	u64 lowmem = ram >= 0xb0000000ull ? 0x80000000ull : 0xb0000000ull;
	u64 above = ram > lowmem ? ram - lowmem : 0;
	return (4 * GiB + above + GiB - 1) / GiB * GiB;
}

struct Result {
	std::vector<Range> ranges;
	u64 probes;
	int rc;
};

Result scan(Guest &g, u64 limit = 1ull << 40)
{
	struct fp_ramscan s{};
	s.probe = Guest::probe;
	s.ctx = &g;
	s.limit = limit;
	Result res{{}, 0, fp_ramscan(&s)};
	for (u32 i = 0; i < s.nr_ranges; i++)
		res.ranges.push_back({s.ranges[i].start, s.ranges[i].start + s.ranges[i].size});
	res.probes = s.probes;
	CHECK(res.probes == (u64)g.calls);
	return res;
}

// The cost requirement: per range about 2 log2(pages) probes plus a constant, per segment one
// probe, per gap on the hotplug grid FP_RS_HOLE_STEPS, per DIMM log2(grid / page) to find its start.
u64 probe_bound(const std::vector<Range> &ranges, unsigned dimms)
{
	u64 bound = 4 + FP_RS_HOLE_STEPS * (dimms + 1) + dimms * 16;
	for (const Range &r : ranges)
		bound += 2 * (u64)std::ceil(std::log2((double)((r.end - r.start) / FP_RS_PAGE))) + 4;
	return bound;
}

u64 pages(const std::vector<Range> &ranges)
{
	u64 n = 0;
	for (const Range &r : ranges)
		n += (r.end - r.start) / FP_RS_PAGE;
	return n;
}

} // namespace

TEST_CASE("q35 256 MiB: conventional memory, VGA hole, PAM shadow as RAM joins low memory")
{
	Guest g = q35(256 * MiB, true);
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	std::vector<Range> want{{0, 640 * KiB}, {768 * KiB, 256 * MiB}};
	CHECK(r.ranges == want);
	CHECK(r.probes <= probe_bound(want, 0));
	MESSAGE("256 MiB: " << r.probes << " probes for " << pages(want) << " pages");
}

TEST_CASE("q35 1 GiB with the PAM area read-only (ROM): 640 KiB-1 MiB is a hole")
{
	Guest g = q35(1 * GiB, false);
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	std::vector<Range> want{{0, 640 * KiB}, {1 * MiB, 1 * GiB}};
	CHECK(r.ranges == want);
	CHECK(r.probes <= probe_bound(want, 0));
}

TEST_CASE("q35 PAM partly shadowed (0xc0000-0xeffff RAM, BIOS area ROM)")
{
	Guest g = q35(512 * MiB, false);
	g.rw.push_back({768 * KiB, 960 * KiB});
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	CHECK(r.ranges == std::vector<Range>{{0, 640 * KiB}, {768 * KiB, 960 * KiB}, {1 * MiB, 512 * MiB}});
}

TEST_CASE("q35 2.5 GiB: below lowmem (2.75 GiB), all RAM under the PCI hole, no high memory")
{
	Guest g = q35(2 * GiB + 512 * MiB, true);
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	std::vector<Range> want{{0, 640 * KiB}, {768 * KiB, 2 * GiB + 512 * MiB}};
	CHECK(r.ranges == want);
	CHECK(r.probes <= probe_bound(want, 0));
}

TEST_CASE("q35 3 GiB: >= 2.75 GiB splits at 2 GiB, PCI hole 2-4 GiB, 1 GiB of high memory")
{
	Guest g = q35(3 * GiB, true);
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	std::vector<Range> want{{0, 640 * KiB}, {768 * KiB, 2 * GiB}, {4 * GiB, 5 * GiB}};
	CHECK(r.ranges == want);
	CHECK(r.probes <= probe_bound(want, 0));
	MESSAGE("3 GiB: " << r.probes << " probes for " << pages(want) << " pages");
}

TEST_CASE("q35 3.5 GiB with two hotplugged DIMMs and an unplugged slot between them")
{
	u64 base = device_memory_base(3 * GiB + 512 * MiB);
	CHECK(base == 6 * GiB);	// 4 GiB + 1.5 GiB rounded up to 1 GiB
	// dimm0 at the base; a 1 GiB DIMM after it was unplugged, leaving a gap; dimm2 after the gap.
	Range dimm0{base, base + 512 * MiB}, dimm2{base + 1536 * MiB, base + 2560 * MiB};
	Guest g = q35(3 * GiB + 512 * MiB, false, {dimm0, dimm2});
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	std::vector<Range> want{{0, 640 * KiB}, {1 * MiB, 2 * GiB}, {4 * GiB, 5 * GiB + 512 * MiB}, dimm0,
		dimm2};
	CHECK(r.ranges == want);
	CHECK(r.probes <= probe_bound(want, 2));
	MESSAGE("3.5 GiB + 2 DIMMs: " << r.probes << " probes for " << pages(want) << " pages");
}

TEST_CASE("a DIMM adjacent to high memory is one range; a DIMM with no high memory starts at 4 GiB")
{
	Guest g = q35(3 * GiB, true, {{5 * GiB, 6 * GiB}});
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	CHECK(r.ranges == std::vector<Range>{{0, 640 * KiB}, {768 * KiB, 2 * GiB}, {4 * GiB, 6 * GiB}});

	Guest g2 = q35(1 * GiB, true, {{4 * GiB, 4 * GiB + 256 * MiB}});
	Result r2 = scan(g2);
	REQUIRE(r2.rc == 0);
	CHECK(r2.ranges == std::vector<Range>{{0, 640 * KiB}, {768 * KiB, 1 * GiB}, {4 * GiB, 4 * GiB + 256 * MiB}});
}

TEST_CASE("a DIMM at an unaligned start (2 MiB) is found to the page")
{
	Range dimm{7 * GiB + 2 * MiB, 7 * GiB + 258 * MiB};
	Guest g = q35(3 * GiB, true, {dimm});
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	REQUIRE(r.ranges.size() == 4);
	CHECK(r.ranges[3] == dimm);
}

TEST_CASE("cost: logarithmic in the size, not linear in pages")
{
	Guest small = q35(3 * GiB, true);
	Guest big = q35(3 * GiB, true);
	big.rw.back().end = 4 * GiB + 256 * GiB;	// 256 GiB of high memory
	Result a = scan(small), b = scan(big);
	REQUIRE(a.rc == 0);
	REQUIRE(b.rc == 0);
	CHECK(b.ranges.back() == Range{4 * GiB, 260 * GiB});
	// 256x the size: 8 more doublings and 8 more bisection steps at most.
	CHECK(b.probes <= a.probes + 2 * 8 + 2);
	CHECK(b.probes * 100000 < pages(b.ranges));
	MESSAGE("1 GiB high: " << a.probes << " probes; 256 GiB high: " << b.probes << " probes");
}

TEST_CASE("range limits: the scan stops at the limit; a bad limit is refused")
{
	Guest g = q35(3 * GiB, true);
	g.rw.back().end = 64 * GiB;
	Result r = scan(g, 8 * GiB);
	REQUIRE(r.rc == 0);
	CHECK(r.ranges.back() == Range{4 * GiB, 8 * GiB});

	Guest g2 = q35(1 * GiB, true);
	CHECK(scan(g2, 4 * GiB).rc == -EINVAL);
	Guest g3 = q35(1 * GiB, true);
	CHECK(scan(g3, 8 * GiB + 1).rc == -EINVAL);
}

TEST_CASE("nothing mapped yet: no ranges, bounded probes")
{
	Guest g;
	Result r = scan(g);
	REQUIRE(r.rc == 0);
	CHECK(r.ranges.empty());
	CHECK(r.probes <= 4 + FP_RS_HOLE_STEPS);
}

TEST_CASE("too many ranges: -E2BIG; a probe's error stops the scan")
{
	Guest g = q35(3 * GiB, false);
	for (u64 i = 0; i < FP_RS_MAX_RANGES; i++)	// DIMMs every 512 MiB with 256 MiB gaps
		g.rw.push_back({6 * GiB + i * 512 * MiB, 6 * GiB + i * 512 * MiB + 256 * MiB});
	CHECK(scan(g).rc == -E2BIG);

	for (int n : {0, 1, 5, 40}) {
		Guest e = q35(3 * GiB, true);
		e.fail_at_probe = n;
		Result r = scan(e);
		CHECK(r.rc == -EFAULT);
		CHECK(r.probes == (u64)n + 1);
	}
}

// fp_ramscan_next() walks part of a known range that QEMU mapped again (dmawin.c's refill): here the
// layout's slot [768 KiB, 1 GiB) after SeaBIOS made its BIOS area read-only (0xf0000-0xfffff a hole).
std::vector<Range> walk(Guest &g, u64 from, u64 end, u64 *probes, int *rc)
{
	struct fp_ramscan s{};
	std::vector<Range> out;
	u64 rs, re;

	s.probe = Guest::probe;
	s.ctx = &g;
	while ((*rc = fp_ramscan_next(&s, from, end, &rs, &re)) > 0) {
		out.push_back({rs, re});
		from = re;
	}
	*probes = s.probes;
	return out;
}

TEST_CASE("fp_ramscan_next: the runs of a span, holes at its start, middle and end, in log probes")
{
	Guest g;
	g.rw = {{0, 0xf0000}, {1 * MiB, 1 * GiB - 8 * KiB}};
	u64 probes;
	int rc;

	std::vector<Range> want = {{768 * KiB, 0xf0000}, {1 * MiB, 1 * GiB - 8 * KiB}};
	CHECK(walk(g, 768 * KiB, 1 * GiB, &probes, &rc) == want);
	CHECK(rc == 0);
	CHECK(probes <= probe_bound(want, 0));
	MESSAGE("[768 KiB, 1 GiB) with a 64 KiB hole: " << probes << " probes");

	want = {{1 * MiB, 1 * GiB - 8 * KiB}};
	CHECK(walk(g, 0xf0000, 1 * GiB, &probes, &rc) == want);	// a hole first
	CHECK(rc == 0);
	CHECK(walk(g, 1 * GiB - 8 * KiB, 1 * GiB, &probes, &rc).empty());	// only a hole
	CHECK(rc == 0);
	CHECK(probes == 2);
	CHECK(walk(g, 4 * KiB, 4 * KiB, &probes, &rc).empty());	// empty span
	CHECK(probes == 0);

	g.rw.clear();	// nothing mapped again (yet): a 1 GiB hole costs log2 probes
	CHECK(walk(g, 1 * MiB, 1 * GiB, &probes, &rc).empty());
	CHECK(probes <= 20);

	Guest e = q35(1 * GiB, true);
	e.fail_at_probe = 3;
	walk(e, 1 * MiB, 1 * GiB, &probes, &rc);
	CHECK(rc == -EFAULT);
}
