// farpass.ko's config-space virtualisation (mdev/cfg.c, compiled from the same source as the module):
// which bytes are virtual, forwarded or hidden, BAR sizing, the rebuilt capability chain, and the
// pieces the dispatcher serves, forwarded writes kept before the borrow and their replay.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

// cfg.h brings in the uapi, whose struct farpass_irq_bridge ends in a C flexible array member.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include "cfg.h"
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace {

// A lender device's config space, read through the scan's callback (counts the reads).
struct FakeLender {
	std::array<u8, 256> cfg{};
	int reads = 0;
	int fail_at = -1;	// the n-th read fails with -110 (ETIMEDOUT)
	void put(u32 off, u32 val, u32 size)
	{
		for (u32 i = 0; i < size; i++)
			cfg[off + i] = static_cast<u8>(val >> (8 * i));
	}
	static int read(void *ctx, u32 off, u32 size, u32 *val)
	{
		auto *l = static_cast<FakeLender *>(ctx);
		if (l->reads++ == l->fail_at)
			return -110;
		CHECK(off % size == 0);
		*val = 0;
		for (u32 i = 0; i < size; i++)
			*val |= static_cast<u32>(l->cfg[off + i]) << (8 * i);
		return 0;
	}
};

// An NVMe-like device: PM @0x40 -> VPD @0x50 (hidden) -> MSI-X @0x60 -> AF @0x70 (hidden) ->
// PCIe @0x80 -> MSI (64-bit, maskable) @0xc0.
FakeLender nvme_like()
{
	FakeLender l;
	l.put(0x00, 0x00101b36, 4);
	l.put(0x06, 0x0010, 2);		// status: capability list
	l.put(0x34, 0x40, 1);
	l.put(0x40, 0x0003'5001, 4);	// PM, next 0x50
	l.put(0x50, 0x0000'6003, 4);	// VPD, next 0x60
	l.put(0x60, 0x003f'7011, 4);	// MSI-X, 64 vectors, next 0x70
	l.put(0x64, 0x00002000, 4);	// table in BAR0 at 0x2000
	l.put(0x68, 0x00003000, 4);	// PBA in BAR0 at 0x3000
	l.put(0x70, 0x0306'8013, 4);	// AF, next 0x80
	l.put(0x80, 0x0002'c010, 4);	// PCIe, next 0xc0
	l.put(0xc0, 0x0180'0005, 4);	// MSI: 64-bit, per-vector mask; last
	return l;
}

std::array<farpass_bar, FARPASS_NUM_BARS> bars_nvme()
{
	std::array<farpass_bar, FARPASS_NUM_BARS> b{};
	b[0] = {0x4000, FARPASS_BAR_MEM64, 0, 0};		// 16 KiB 64-bit, upper half in BAR1
	b[2] = {0x100, FARPASS_BAR_IO, 0, 0};
	b[3] = {0x1000, FARPASS_BAR_PREFETCH, 0, 0};	// 4 KiB 32-bit prefetchable
	b[4] = {0x200000000ULL, FARPASS_BAR_MEM64 | FARPASS_BAR_PREFETCH, 0, 0};	// 8 GiB
	return b;
}

u32 rd(const fp_vcfg &c, u32 off, u32 size)
{
	u8 buf[4] = {};
	fp_vcfg_read(&c, off, size, buf);
	return buf[0] | buf[1] << 8 | buf[2] << 16 | static_cast<u32>(buf[3]) << 24;
}

void wr(fp_vcfg &c, u32 off, u32 size, u32 val)
{
	u8 buf[4];
	std::memcpy(buf, &val, 4);
	fp_vcfg_write(&c, off, size, buf);
}

std::vector<fp_cfg_piece> pieces(const fp_vcfg &c, u32 off, u32 count)
{
	std::vector<fp_cfg_piece> out;
	for (u32 done = 0; done < count;) {
		fp_cfg_piece p;
		fp_vcfg_piece(&c, off + done, count - done, &p);
		REQUIRE(p.size >= 1);
		out.push_back(p);
		done += p.size;
	}
	return out;
}

} // namespace

TEST_CASE("header: which bytes are virtual, forwarded, hidden")
{
	fp_vcfg c;
	auto b = bars_nvme();
	fp_vcfg_init(&c, b.data());
	for (u32 off : {0x00u, 0x02u, 0x06u, 0x08u, 0x0bu, 0x0cu, 0x0eu, 0x2cu, 0x2eu, 0x3eu, 0x40u, 0xffu})
		CHECK_MESSAGE(c.kind[off] == FP_CFG_FWD, off);
	for (u32 off : {0x04u, 0x05u})
		CHECK(c.kind[off] == FP_CFG_CMD);
	for (u32 off = 0x10; off < 0x28; off++)
		CHECK(c.kind[off] == FP_CFG_VIRT);
	for (u32 off : {0x34u, 0x3cu, 0x3du})
		CHECK(c.kind[off] == FP_CFG_VIRT);
	for (u32 off : {0x0fu, 0x28u, 0x30u, 0x33u, 0x35u, 0x3bu})
		CHECK(c.kind[off] == FP_CFG_ZERO);
	CHECK(rd(c, 0x3c, 2) == 0);	// interrupt pin 0 until the scan reads the lender's
	wr(c, 0x3c, 2, 0x010b);
	CHECK(rd(c, 0x3c, 2) == 0x000b);	// line is the guest's scratch, pin read-only
	wr(c, 0x30, 4, 0xffffffff);
	CHECK(rd(c, 0x30, 4) == 0);	// no expansion ROM
}

TEST_CASE("interrupt pin: the lender's from the scan, read-only; one not INTA..INTD reads 0")
{
	for (auto [pin, want] : {std::pair{1u, 1u}, {4u, 4u}, {0u, 0u}, {5u, 0u}, {0xffu, 0u}}) {
		fp_vcfg c;
		auto b = bars_nvme();
		FakeLender l = nvme_like();
		l.put(0x3d, pin, 1);
		fp_vcfg_init(&c, b.data());
		REQUIRE(fp_vcfg_scan_caps(&c, FakeLender::read, &l) == 0);
		CHECK_MESSAGE(rd(c, 0x3d, 1) == want, pin);
		wr(c, 0x3c, 2, 0x020b);
		CHECK_MESSAGE(rd(c, 0x3c, 2) == (want << 8 | 0x0b), pin);
	}
}

TEST_CASE("BAR sizing: all-ones reads back the size mask with the type bits, addresses are kept")
{
	fp_vcfg c;
	auto b = bars_nvme();
	fp_vcfg_init(&c, b.data());
	CHECK(rd(c, 0x10, 4) == 0x4);	// 64-bit memory
	wr(c, 0x10, 4, 0xffffffff);
	wr(c, 0x14, 4, 0xffffffff);
	CHECK(rd(c, 0x10, 4) == 0xffffc004);
	CHECK(rd(c, 0x14, 4) == 0xffffffff);
	wr(c, 0x10, 4, 0xfebf0000);
	wr(c, 0x14, 4, 0x1);
	CHECK(rd(c, 0x10, 4) == 0xfebf0004);	// the guest's address is kept
	CHECK(rd(c, 0x14, 4) == 0x1);
	wr(c, 0x10, 4, 0xfebf1234);
	CHECK(rd(c, 0x10, 4) == 0xfebf0004);	// bits below the size are not writable

	wr(c, 0x18, 4, 0xffffffff);
	CHECK(rd(c, 0x18, 4) == 0xffffff01);	// 256-byte I/O
	wr(c, 0x1c, 4, 0xffffffff);
	CHECK(rd(c, 0x1c, 4) == 0xfffff008);	// 4 KiB 32-bit prefetchable
	wr(c, 0x20, 4, 0xffffffff);
	wr(c, 0x24, 4, 0xffffffff);
	CHECK(rd(c, 0x20, 4) == 0x0000000c);	// 8 GiB: no writable bit in the low half
	CHECK(rd(c, 0x24, 4) == 0xfffffffe);

	// Sub-dword writes (byte by byte, as some guests size BARs) give the same result.
	fp_vcfg_init(&c, b.data());
	for (u32 i = 0; i < 4; i++)
		wr(c, 0x1c + i, 1, 0xff);
	CHECK(rd(c, 0x1c, 4) == 0xfffff008);

	u32 mask, low;
	std::array<farpass_bar, FARPASS_NUM_BARS> none{};
	fp_bar_bits(none.data(), 0, &mask, &low);
	CHECK(mask == 0);
	CHECK(low == 0);
}

TEST_CASE("BAR addresses: what the guest placed, not sizing, not unplaced")
{
	fp_vcfg c;
	auto b = bars_nvme();
	fp_vcfg_init(&c, b.data());
	u64 a = 0;
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), 0, &a));	// not placed yet (0)
	wr(c, 0x10, 4, 0xffffffff);
	wr(c, 0x14, 4, 0xffffffff);
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), 0, &a));	// sizing
	wr(c, 0x10, 4, 0xfebf0000);
	wr(c, 0x14, 4, 0x1);
	REQUIRE(fp_vcfg_bar_addr(&c, b.data(), 0, &a));
	CHECK(a == 0x1febf0000ULL);				// both halves, type bits dropped
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), 1, &a));	// the upper half is no BAR of its own
	wr(c, 0x18, 4, 0xc000);
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), 2, &a));	// I/O
	wr(c, 0x1c, 4, 0xfe000000);
	REQUIRE(fp_vcfg_bar_addr(&c, b.data(), 3, &a));
	CHECK(a == 0xfe000000ULL);				// 32-bit
	wr(c, 0x20, 4, 0);
	wr(c, 0x24, 4, 0xfffffffe);
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), 4, &a));	// 8 GiB at the sizing value
	wr(c, 0x24, 4, 0x2);
	REQUIRE(fp_vcfg_bar_addr(&c, b.data(), 4, &a));
	CHECK(a == 0x200000000ULL);
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), -1, &a));
	CHECK_FALSE(fp_vcfg_bar_addr(&c, b.data(), FARPASS_NUM_BARS, &a));
}

TEST_CASE("capability chain: PM, MSI-X, PCIe, MSI kept; VPD and AF hidden and read as 0")
{
	fp_vcfg c;
	auto b = bars_nvme();
	auto l = nvme_like();
	fp_vcfg_init(&c, b.data());
	REQUIRE(fp_vcfg_scan_caps(&c, FakeLender::read, &l) == 0);
	CHECK(std::vector<u8>(c.kept, c.kept + c.nr_kept) == std::vector<u8>{0x01, 0x11, 0x10, 0x05});
	CHECK(std::vector<u8>(c.hidden, c.hidden + c.nr_hidden) == std::vector<u8>{0x03, 0x13});

	// Walk the virtual chain as a guest does.
	std::vector<u8> ids;
	for (u32 pos = rd(c, 0x34, 1); pos; pos = rd(c, pos + 1, 1)) {
		REQUIRE(c.kind[pos] == FP_CFG_VIRT);
		ids.push_back(static_cast<u8>(rd(c, pos, 1)));
	}
	CHECK(ids == std::vector<u8>{0x01, 0x11, 0x10, 0x05});
	CHECK(rd(c, 0x40 + 1, 1) == 0x60);	// PM now skips VPD
	CHECK(rd(c, 0x60 + 1, 1) == 0x80);	// MSI-X skips AF
	CHECK(rd(c, 0x50, 4) == 0);		// hidden VPD header (and body) read as 0
	CHECK(rd(c, 0x70, 4) == 0);
	CHECK(c.kind[0x72] == FP_CFG_ZERO);	// AF's 6 bytes
	CHECK(c.kind[0x76] == FP_CFG_FWD);	// beyond: unassigned bytes go to the device, as vfio-pci

	// PM and PCIe bodies are forwarded, MSI-X and MSI virtual and seeded from the lender.
	CHECK(c.kind[0x42] == FP_CFG_FWD);
	CHECK(c.kind[0x82] == FP_CFG_FWD);
	CHECK(c.msix == 0x60);
	CHECK(rd(c, 0x60, 4) == 0x003f8011);
	CHECK(rd(c, 0x64, 4) == 0x2000);
	wr(c, 0x62, 2, 0xffff);
	CHECK(rd(c, 0x62, 2) == 0xc03f);	// enable and function mask only
	wr(c, 0x64, 4, 0);
	CHECK(rd(c, 0x64, 4) == 0x2000);	// table offset is read-only

	CHECK(c.msi == 0xc0);
	wr(c, 0xc2, 2, 0xffff);
	CHECK(rd(c, 0xc2, 2) == 0x01f1);	// enable + multiple message enable
	wr(c, 0xc4, 4, 0xfee00003);
	CHECK(rd(c, 0xc4, 4) == 0xfee00000);
	wr(c, 0xc8, 4, 0x12345678);
	CHECK(rd(c, 0xc8, 4) == 0x12345678);	// upper address
	wr(c, 0xcc, 2, 0x4021);
	CHECK(rd(c, 0xcc, 2) == 0x4021);	// data
	wr(c, 0xd0, 4, 0xffffffff);
	CHECK(rd(c, 0xd0, 4) == 0xffffffff);	// mask bits
	wr(c, 0xd4, 4, 0xffffffff);
	CHECK(rd(c, 0xd4, 4) == 0);		// pending: read-only
	CHECK(c.kind[0xd7] == FP_CFG_VIRT);
	CHECK(c.kind[0xd8] == FP_CFG_FWD);

	// Reset: command and the MSI/MSI-X enables off, BARs and MSI address kept.
	fp_vcfg_set_command(&c, 0x0406);
	wr(c, 0x10, 4, 0xfebf0000);
	fp_vcfg_reset(&c);
	CHECK(fp_vcfg_command(&c) == 0);
	CHECK(rd(c, 0x62, 2) == 0x003f);
	CHECK(rd(c, 0xc2, 2) == 0x0180);
	CHECK(rd(c, 0x10, 4) == 0xfebf0004);
	CHECK(rd(c, 0xc4, 4) == 0xfee00000);
}

TEST_CASE("capability scan: no list, errors, loops, out-of-range pointers")
{
	fp_vcfg c;
	std::array<farpass_bar, FARPASS_NUM_BARS> b{};
	FakeLender none;
	fp_vcfg_init(&c, b.data());
	CHECK(fp_vcfg_scan_caps(&c, FakeLender::read, &none) == 0);
	CHECK(c.nr_kept == 0);
	CHECK(rd(c, 0x34, 1) == 0);

	auto l = nvme_like();
	l.fail_at = 3;	// a read times out mid-way: the error comes back
	fp_vcfg_init(&c, b.data());
	CHECK(fp_vcfg_scan_caps(&c, FakeLender::read, &l) == -110);

	auto loop = nvme_like();
	loop.put(0x80, 0x0002'4010, 4);	// PCIe points back to PM
	fp_vcfg_init(&c, b.data());
	CHECK(fp_vcfg_scan_caps(&c, FakeLender::read, &loop) == -1);
	CHECK(c.nr_kept == 3);		// what was read before the loop stays

	auto low = nvme_like();
	low.put(0x34, 0x20, 1);		// into the header
	fp_vcfg_init(&c, b.data());
	CHECK(fp_vcfg_scan_caps(&c, FakeLender::read, &low) == -1);
	CHECK(rd(c, 0x34, 1) == 0);

	auto all_ones = nvme_like();	// a dead lender reads all-ones
	all_ones.cfg.fill(0xff);
	fp_vcfg_init(&c, b.data());
	CHECK(fp_vcfg_scan_caps(&c, FakeLender::read, &all_ones) == -1);
	CHECK(c.nr_kept == 0);
}

// Checks: an MSI (64-bit, maskable: 24 bytes) at 0xf8 and an MSI-X (12 bytes) at 0xf8, both running past
// the 256-byte space, are hidden (no MSI/MSI-X offset, in the hidden list, their bytes read 0, the
// chain skips them); the scan wrote nothing outside the tables (the fields after them, and a canary
// after the struct, are as before the scan).
TEST_CASE("capability scan: a capability running past the config space is hidden, no write outside the tables")
{
	for (u32 dw0 : {0x0180'0005u, 0x0000'0011u}) {	// MSI 64-bit maskable, MSI-X 1 vector; both last
		struct {
			fp_vcfg c;
			std::array<u8, 64> canary;
		} v;
		std::array<farpass_bar, FARPASS_NUM_BARS> b{};
		FakeLender l;
		l.put(0x06, 0x0010, 2);
		l.put(0x34, 0x40, 1);
		l.put(0x40, 0x0003'f801, 4);	// PM, next 0xf8
		l.put(0xf8, dw0, 4);
		fp_vcfg_init(&v.c, b.data());
		v.canary.fill(0xa5);
		CAPTURE(dw0);
		CHECK(fp_vcfg_scan_caps(&v.c, FakeLender::read, &l) == 0);
		CHECK(v.c.msi == 0);
		CHECK(v.c.msix == 0);
		CHECK(v.c.nr_kept == 1);
		CHECK(v.c.kept[0] == 0x01);
		REQUIRE(v.c.nr_hidden == 1);
		CHECK(v.c.hidden[0] == static_cast<u8>(dw0));
		CHECK(rd(v.c, 0x41, 1) == 0);	// PM is the last kept one
		CHECK(rd(v.c, 0xf8, 4) == 0);
		CHECK(rd(v.c, 0xfc, 4) == 0);
		CHECK(std::all_of(v.canary.begin(), v.canary.end(), [](u8 x) { return x == 0xa5; }));
	}
}

TEST_CASE("pieces: forwarded runs are naturally aligned 1/2/4, virtual runs do not cross kinds")
{
	fp_vcfg c;
	auto b = bars_nvme();
	auto l = nvme_like();
	fp_vcfg_init(&c, b.data());
	REQUIRE(fp_vcfg_scan_caps(&c, FakeLender::read, &l) == 0);

	auto p = pieces(c, 0, 4);	// vendor + device: one forwarded dword
	REQUIRE(p.size() == 1);
	CHECK(p[0].kind == FP_CFG_FWD);
	CHECK(p[0].size == 4);

	p = pieces(c, 0, 8);		// vendor/device, command (virtual), status (forwarded)
	REQUIRE(p.size() == 3);
	CHECK((p[0].kind == FP_CFG_FWD && p[0].size == 4));
	CHECK((p[1].kind == FP_CFG_CMD && p[1].off == 4 && p[1].size == 2));
	CHECK((p[2].kind == FP_CFG_FWD && p[2].off == 6 && p[2].size == 2));

	p = pieces(c, 0x0c, 4);		// cache line, latency, header type forwarded; BIST hidden
	REQUIRE(p.size() == 3);
	CHECK((p[0].size == 2 && p[0].kind == FP_CFG_FWD));
	CHECK((p[1].off == 0x0e && p[1].size == 1 && p[1].kind == FP_CFG_FWD));
	CHECK((p[2].off == 0x0f && p[2].kind == FP_CFG_ZERO));

	p = pieces(c, 0x01, 3);		// unaligned: 1 + 2
	REQUIRE(p.size() == 2);
	CHECK((p[0].size == 1 && p[1].off == 2 && p[1].size == 2));

	p = pieces(c, 0x10, 24);	// all six BARs: one virtual piece
	REQUIRE(p.size() == 1);
	CHECK((p[0].kind == FP_CFG_VIRT && p[0].size == 24));

	// The whole region as QEMU reads it: every byte covered once, forwarded pieces aligned,
	// the extended space one hidden piece.
	p = pieces(c, 0, FP_CFG_REGION_SIZE);
	u32 next = 0, fwd = 0;
	for (auto &q : p) {
		CHECK(q.off == next);
		if (q.kind == FP_CFG_FWD) {
			CHECK((q.size == 1 || q.size == 2 || q.size == 4));
			CHECK(q.off % q.size == 0);
			fwd++;
		}
		next += q.size;
	}
	CHECK(next == FP_CFG_REGION_SIZE);
	CHECK((p.back().kind == FP_CFG_ZERO && p.back().off == FP_CFG_SPACE && p.back().size == 3840));
	CHECK(fwd < 70);	// about a dword per upcall, not a byte

	u8 buf[8];
	std::memset(buf, 0xaa, sizeof(buf));
	fp_vcfg_read(&c, 0x200, 8, buf);
	CHECK(buf[7] == 0);
}

TEST_CASE("writes before the borrow: kept per byte, read back over the lender's, replayed in aligned pieces")
{
	fp_vcfg c;
	auto b = bars_nvme();
	auto l = nvme_like();
	fp_vcfg_init(&c, b.data());
	REQUIRE(fp_vcfg_scan_caps(&c, FakeLender::read, &l) == 0);
	fp_cfg_pend d{};
	fp_cfg_piece p;
	CHECK_FALSE(fp_cfg_pend_next(&d, &c, 0, &p));	// nothing kept

	const u8 devctl[2] = {0x10, 0x20}, devctl_again[2] = {0x1f, 0x50}, devsta[2] = {0x0f, 0x00};
	fp_cfg_pend_write(&d, 0x88, 2, devctl);		// PCIe Device Control
	fp_cfg_pend_write(&d, 0x88, 2, devctl_again);	// a later write of the same bytes replaces it
	fp_cfg_pend_write(&d, 0x8a, 2, devsta);		// Device Status next to it
	const u8 pm[6] = {1, 2, 3, 4, 5, 6};
	fp_cfg_pend_write(&d, 0x45, 6, pm);		// unaligned: PM body and the bytes after it
	const u8 last = 0x77;
	fp_cfg_pend_write(&d, 0xff, 1, &last);		// the last conventional byte

	// Reads: the kept bytes over what the lender returned, the others untouched.
	u8 buf[4] = {0xaa, 0xbb, 0xcc, 0xdd};
	fp_cfg_pend_read(&d, 0x86, 4, buf);
	CHECK((buf[0] == 0xaa && buf[1] == 0xbb && buf[2] == 0x1f && buf[3] == 0x50));
	std::memset(buf, 0xee, sizeof(buf));
	fp_cfg_pend_read(&d, 0xfe, 4, buf);	// stops at the end of the conventional space
	CHECK((buf[0] == 0xee && buf[1] == 0x77 && buf[2] == 0xee));

	// Replay: offset order, each kept byte once, naturally aligned forwarded pieces of kept bytes only.
	std::vector<fp_cfg_piece> r;
	for (u32 off = 0; fp_cfg_pend_next(&d, &c, off, &p); off = p.off + p.size) {
		CHECK(p.kind == FP_CFG_FWD);
		CHECK(p.off % p.size == 0);
		for (u32 i = 0; i < p.size; i++)
			CHECK(d.mask[p.off + i] == 1);
		r.push_back(p);
	}
	std::vector<std::pair<u32, u32>> got;
	for (auto &q : r)
		got.emplace_back(q.off, q.size);
	CHECK(got == std::vector<std::pair<u32, u32>>{{0x45, 1}, {0x46, 2}, {0x48, 2}, {0x4a, 1}, {0x88, 4}, {0xff, 1}});
	CHECK(d.val[0x88] == 0x1f);
	CHECK(d.val[0x8b] == 0x00);

	// An odd start, and a dword with a hidden byte (BIST): one-byte pieces.
	fp_cfg_pend e{};
	const u8 two[2] = {0x40, 0x00};
	fp_cfg_pend_write(&e, 0x0d, 2, two);	// latency timer, header type
	REQUIRE(fp_cfg_pend_next(&e, &c, 0, &p));
	CHECK((p.off == 0x0d && p.size == 1));
	REQUIRE(fp_cfg_pend_next(&e, &c, 0x0e, &p));
	CHECK((p.off == 0x0e && p.size == 1));
	CHECK_FALSE(fp_cfg_pend_next(&e, &c, 0x0f, &p));
}

TEST_CASE("capability policy table")
{
	CHECK(fp_cap_policy(0x01) == FP_CAP_FORWARD);	// PM
	CHECK(fp_cap_policy(0x09) == FP_CAP_FORWARD);	// vendor-specific
	CHECK(fp_cap_policy(0x10) == FP_CAP_FORWARD);	// PCI Express
	CHECK(fp_cap_policy(0x05) == FP_CAP_VIRT);	// MSI
	CHECK(fp_cap_policy(0x11) == FP_CAP_VIRT);	// MSI-X
	for (u8 id : {0x02, 0x03, 0x04, 0x06, 0x07, 0x08, 0x0a, 0x0d, 0x12, 0x13, 0x14, 0x15, 0xff})
		CHECK_MESSAGE(fp_cap_policy(id) == FP_CAP_HIDE, static_cast<int>(id));
}
