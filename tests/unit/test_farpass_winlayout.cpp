// farpass.ko's DMA window layout (mdev/winlayout.c, compiled from the same source as the module):
// guest RAM ranges found by mdev/ramscan.c packed into one window, sizes, alignment, refusals, and the
// GPA <-> window offset lookups of both sides.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "winlayout.h"

#include <cerrno>
#include <initializer_list>
#include <vector>

namespace {

constexpr u64 KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// A synthetic guest for fp_ramscan(): the IOVA ranges QEMU mapped read-write.
struct Guest {
	std::vector<fp_ram_range> rw;
	static int probe(void *ctx, u64 iova, u64 npages)
	{
		for (const fp_ram_range &r : static_cast<Guest *>(ctx)->rw)
			if (iova >= r.start && iova + npages * FP_RS_PAGE <= r.start + r.size)
				return 1;
		return 0;
	}
};

// Scan a q35-like guest (see test_farpass_ramscan.cpp) and return what fp_ramscan() found.
std::vector<fp_ram_range> scan(std::vector<fp_ram_range> rw)
{
	Guest g{rw};
	struct fp_ramscan s{};
	s.probe = Guest::probe;
	s.ctx = &g;
	s.limit = 1ull << 40;
	REQUIRE(fp_ramscan(&s) == 0);
	return {s.ranges, s.ranges + s.nr_ranges};
}

// q35 with 3 GiB: 2 GiB below the PCI hole, 1 GiB from 4 GiB; PAM area read-only.
std::vector<fp_ram_range> q35_3g()
{
	return scan({{0, 640 * KiB}, {1 * MiB, 2 * GiB - 1 * MiB}, {4 * GiB, 1 * GiB}});
}

fp_win_params params(u64 size, u64 xlat = 1 * MiB, u64 range = 2 * MiB)
{
	return {size, xlat, range};
}

} // namespace

TEST_CASE("q35 3 GiB: low memory is an identity map, high memory follows at 2 GiB")
{
	auto ranges = q35_3g();
	REQUIRE(ranges.size() == 3);
	struct fp_win_layout l{};
	fp_win_params p = params(4 * GiB);
	REQUIRE(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);
	REQUIRE(l.nr == 3);
	CHECK(l.slots[0].gpa == 0);
	CHECK(l.slots[0].offset == 0);
	CHECK(l.slots[0].size == 640 * KiB);
	CHECK(l.slots[1].gpa == 1 * MiB);
	CHECK(l.slots[1].offset == 1 * MiB);	// keeps its 2 MiB phase: after 640 KiB, at 1 MiB
	CHECK(l.slots[2].gpa == 4 * GiB);
	CHECK(l.slots[2].offset == 2 * GiB);
	CHECK(l.size == 3 * GiB);		// the hole below 1 MiB costs 384 KiB, rounded away
	for (u32 i = 0; i < l.nr; i++)
		CHECK((l.slots[i].offset - l.slots[i].gpa) % (2 * MiB) == 0);
}

TEST_CASE("q35 256 MiB with the PAM area as RAM: two slots, total rounded to the NTB alignment")
{
	auto ranges = scan({{0, 640 * KiB}, {768 * KiB, 256 * MiB - 768 * KiB}});
	REQUIRE(ranges.size() == 2);
	struct fp_win_layout l{};
	fp_win_params p = params(256 * MiB, 4 * MiB);
	REQUIRE(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);
	CHECK(l.slots[1].offset == 768 * KiB);
	CHECK(l.size == 256 * MiB);
	p.size = 256 * MiB - 4 * MiB;
	CHECK(fp_win_build(ranges.data(), ranges.size(), &p, &l) == -E2BIG);
	CHECK(l.size == 256 * MiB);	// what it would take
}

TEST_CASE("hotplugged DIMMs pack after high memory, keeping their 2 MiB phase")
{
	auto ranges = scan({{0, 640 * KiB}, {1 * MiB, 2 * GiB - 1 * MiB}, {4 * GiB, 1536 * MiB},
		{6 * GiB + 1 * MiB, 510 * MiB}, {7 * GiB + 512 * MiB, 1 * GiB}});
	REQUIRE(ranges.size() == 5);
	struct fp_win_layout l{};
	fp_win_params p = params(8 * GiB);
	REQUIRE(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);
	CHECK(l.slots[2].offset == 2 * GiB);
	CHECK(l.slots[3].offset == 3 * GiB + 512 * MiB + 1 * MiB);	// phase 1 MiB, as its GPA
	CHECK(l.slots[3].gpa == 6 * GiB + 1 * MiB);
	CHECK(l.slots[4].offset == 4 * GiB);				// 1 MiB skipped to keep phase 0
	CHECK(l.size == 5 * GiB);
	for (u32 i = 1; i < l.nr; i++)
		CHECK(l.slots[i].offset >= l.slots[i - 1].offset + l.slots[i - 1].size);
}

TEST_CASE("alignment: page-phase only packs tightly; a large NTB alignment rounds the total")
{
	auto ranges = q35_3g();
	struct fp_win_layout l{};
	fp_win_params p = params(4 * GiB, FP_WIN_PAGE, FP_WIN_PAGE);
	REQUIRE(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);
	CHECK(l.slots[1].offset == 640 * KiB);
	CHECK(l.slots[2].offset == 2 * GiB - 384 * KiB);
	CHECK(l.size == 3 * GiB - 384 * KiB);

	p = params(4 * GiB, 1 * GiB);
	REQUIRE(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);
	CHECK(l.size == 3 * GiB);
	fp_ram_range odd[] = {{0, 640 * KiB}, {1 * MiB, 1 * GiB}};
	REQUIRE(fp_win_build(odd, 2, &p, &l) == 0);
	CHECK(l.size == 2 * GiB);	// 1 GiB + 1 MiB rounded up to the 1 GiB translation alignment
}

TEST_CASE("refusals: window too small, too many ranges, bad parameters and ranges")
{
	auto ranges = q35_3g();
	struct fp_win_layout l{};
	fp_win_params p = params(3 * GiB);
	CHECK(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);	// exact fit
	p.size = 3 * GiB - 1 * MiB;
	CHECK(fp_win_build(ranges.data(), ranges.size(), &p, &l) == -E2BIG);
	p.size = 0;
	CHECK(fp_win_build(ranges.data(), ranges.size(), &p, &l) == -E2BIG);
	CHECK(fp_win_build(ranges.data(), 0, &p, &l) == 0);	// no RAM: nothing to map
	CHECK(l.size == 0);

	std::vector<fp_ram_range> many;
	for (u64 i = 0; i <= FP_WIN_MAX_SLOTS; i++)
		many.push_back({i * 2 * MiB, 1 * MiB});
	p = params(1 * GiB);
	CHECK(fp_win_build(many.data(), FP_WIN_MAX_SLOTS, &p, &l) == 0);
	CHECK(fp_win_build(many.data(), many.size(), &p, &l) == -ENOSPC);

	for (fp_win_params bad : {params(4 * GiB, 0), params(4 * GiB, 3 * MiB), params(4 * GiB, 2 * KiB),
	     params(4 * GiB, 1 * MiB, 0), params(4 * GiB, 1 * MiB, 3 * MiB)})
		CHECK(fp_win_build(ranges.data(), ranges.size(), &bad, &l) == -EINVAL);

	p = params(16 * GiB);
	fp_ram_range unaligned[] = {{0, 640 * KiB + 1}};
	fp_ram_range empty[] = {{0, 0}};
	fp_ram_range overlap[] = {{0, 2 * MiB}, {1 * MiB, 2 * MiB}};
	fp_ram_range descending[] = {{4 * GiB, 1 * GiB}, {0, 640 * KiB}};
	fp_ram_range wraps[] = {{~0ull - 4095 - 8191, 16384}};
	CHECK(fp_win_build(unaligned, 1, &p, &l) == -EINVAL);
	CHECK(fp_win_build(empty, 1, &p, &l) == -EINVAL);
	CHECK(fp_win_build(overlap, 2, &p, &l) == -EINVAL);
	CHECK(fp_win_build(descending, 2, &p, &l) == -EINVAL);
	CHECK(fp_win_build(wraps, 1, &p, &l) == -EINVAL);
}

TEST_CASE("lookups: GPA -> offset for the lender's MAP_DMA, offset -> GPA for the borrower")
{
	auto ranges = q35_3g();
	struct fp_win_layout l{};
	fp_win_params p = params(4 * GiB, 1 * MiB, FP_WIN_PAGE);	// tight packing: offsets differ from GPAs
	REQUIRE(fp_win_build(ranges.data(), ranges.size(), &p, &l) == 0);
	u64 off = 0, gpa = 0;

	// Every page of every slot maps, both ways, and the two lookups are inverse.
	for (u32 i = 0; i < l.nr; i++) {
		const fp_win_slot &s = l.slots[i];
		for (u64 x : std::initializer_list<u64>{s.gpa, s.gpa + FP_WIN_PAGE, s.gpa + s.size / 2,
		     s.gpa + s.size - FP_WIN_PAGE}) {
			REQUIRE(fp_win_gpa_to_off(&l, x, FP_WIN_PAGE, &off) == 0);
			CHECK(off == s.offset + (x - s.gpa));
			REQUIRE(fp_win_off_to_gpa(&l, off, FP_WIN_PAGE, &gpa) == 0);
			CHECK(gpa == x);
		}
		REQUIRE(fp_win_gpa_to_off(&l, s.gpa, s.size, &off) == 0);	// a whole slot (one MAP_DMA)
		CHECK(off == s.offset);
	}
	CHECK(fp_win_gpa_to_off(&l, 4 * GiB + 123, 8, &off) == 0);	// byte granular inside a slot
	CHECK(off == 2 * GiB - 384 * KiB + 123);

	// Holes and crossings are not RAM.
	CHECK(fp_win_gpa_to_off(&l, 640 * KiB, 1, &off) == -ERANGE);		// VGA window
	CHECK(fp_win_gpa_to_off(&l, 3 * GiB, FP_WIN_PAGE, &off) == -ERANGE);	// PCI hole
	CHECK(fp_win_gpa_to_off(&l, 5 * GiB, 1, &off) == -ERANGE);		// above high memory
	CHECK(fp_win_gpa_to_off(&l, 640 * KiB - 8, 16, &off) == -ERANGE);	// runs into the hole
	CHECK(fp_win_gpa_to_off(&l, 2 * GiB - 8, 16, &off) == -ERANGE);		// slot 1 into the PCI hole
	CHECK(fp_win_gpa_to_off(&l, 0, 0, &off) == -ERANGE);
	CHECK(fp_win_gpa_to_off(&l, 4 * GiB, ~0ull, &off) == -ERANGE);
	CHECK(fp_win_off_to_gpa(&l, l.size, 1, &gpa) == -ERANGE);
	// Adjacent in the window but not in GPA space: one lookup never spans two slots.
	CHECK(fp_win_off_to_gpa(&l, 640 * KiB - 8, 16, &gpa) == -ERANGE);
}
