// farpass.ko's interrupt-bridge mailbox (mdev/mailbox.c, compiled from the same source as the module):
// entry encoding, ordering, wraparound, overflow into the pending bitmap without losing an interrupt
// (also with the consumer's acknowledgements arriving late, as posted writes across an NTB do), bad
// entries, and where the barriers sit.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "mailbox.h"

#include <cerrno>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using Vec = std::pair<u32, u32>;	// (device slot, vector)

// Both sides' memory. The ring area is the consumer's, the ack area the producer's. By default the
// consumer's stores to the ack area land at once; with delay_acks they wait in `inflight` until
// flush() (posted writes through an NTB window arrive late, but in order).
struct Mailbox {
	fp_mbox_geom geom;
	std::vector<u32> ring, ack, shadow;
	fp_mbox_prod prod{};
	fp_mbox_cons cons{};
	fp_mbox_barriers bar{};
	std::vector<Vec> got;
	int wmb = 0, rmb = 0, mb = 0;
	std::function<void(Mailbox &, char)> on_barrier;

	explicit Mailbox(fp_mbox_geom g) : geom(g), ring(fp_mbox_ring_words(&g), 0xdeadbeef),
		ack(FP_MBOX_ACK_WORDS, 0xdeadbeef), shadow(fp_mbox_bitmap_words(&g), 0xdeadbeef)
	{
		bar.write_barrier = [](void *c) { static_cast<Mailbox *>(c)->barrier('w'); };
		bar.read_barrier = [](void *c) { static_cast<Mailbox *>(c)->barrier('r'); };
		bar.full_barrier = [](void *c) { static_cast<Mailbox *>(c)->barrier('m'); };
		bar.ctx = this;
		REQUIRE(fp_mbox_cons_init(&cons, &geom, ring.data(), ack.data(), &bar) == 0);
		REQUIRE(fp_mbox_prod_init(&prod, &geom, ring.data(), ack.data(), shadow.data(), &bar) == 0);
	}
	void barrier(char kind)
	{
		(kind == 'w' ? wmb : kind == 'r' ? rmb : mb)++;
		if (on_barrier)
			on_barrier(*this, kind);
	}
	int post(u32 dev, u32 vec) { return fp_mbox_post(&prod, dev, vec); }
	static void got_fn(void *c, u32 d, u32 v) { static_cast<Mailbox *>(c)->got.push_back({d, v}); }
	u32 drain_ring() { return fp_mbox_drain_ring(&cons, got_fn, this); }
	u32 drain_bulk() { return fp_mbox_drain_bulk(&cons, got_fn, this); }
	// The ring, then the bulk (bitmap, resync) at once; the kernel runs the bulk later, in a work item.
	u32 drain()
	{
		u32 n = drain_ring();
		return n + drain_bulk();
	}
};

} // namespace

TEST_CASE("entries: encode/decode round-trip; marker, lap and range checked")
{
	fp_mbox_geom g{4, 8, 64};
	u32 dev, vec;
	for (u32 idx : {0u, 5u, 16u, 17u, 0xfffffff0u, 0xffffffffu}) {
		u32 e = fp_mbox_encode(idx, g.order, 7, 63);
		REQUIRE(fp_mbox_decode(e, idx, &g, &dev, &vec) == 0);
		CHECK(dev == 7);
		CHECK(vec == 63);
		CHECK(fp_mbox_decode(e, idx + 16, &g, &dev, &vec) == -EINVAL);	// a lap later: stale slot
		CHECK(fp_mbox_decode(e, idx + 128, &g, &dev, &vec) == 0);	// the lap is 3 bits
	}
	CHECK(fp_mbox_decode(0, 0, &g, &dev, &vec) == -EINVAL);			// never written
	CHECK(fp_mbox_decode(0xffffffffu, 0x70, &g, &dev, &vec) == -EINVAL);	// dead link
	CHECK(fp_mbox_decode(fp_mbox_encode(0, 4, 8, 0), 0, &g, &dev, &vec) == -EINVAL);	// device slot
	CHECK(fp_mbox_decode(fp_mbox_encode(0, 4, 0, 64), 0, &g, &dev, &vec) == -EINVAL);	// vector
	CHECK(fp_mbox_decode(fp_mbox_encode(0, 4, 1, 2) & ~FP_MBOX_E_MARKER, 0, &g, &dev, &vec) == -EINVAL);
}

TEST_CASE("geometry: limits and sizes")
{
	fp_mbox_geom ok{FP_MBOX_MAX_ORDER, FP_MBOX_MAX_DEV, FP_MBOX_MAX_VEC};
	CHECK(fp_mbox_geom_valid(&ok));
	CHECK(fp_mbox_bitmap_words(&ok) == FP_MBOX_MAX_DEV * FP_MBOX_MAX_VEC / 32);
	CHECK(fp_mbox_ring_words(&ok) == FP_MBOX_RING + 4096 + 16384);	// 82 KiB at the very most
	fp_mbox_geom small{1, 1, 1};
	CHECK(fp_mbox_ring_words(&small) == FP_MBOX_RING + 2 + 1);
	for (fp_mbox_geom bad : {fp_mbox_geom{0, 1, 1}, fp_mbox_geom{13, 1, 1}, fp_mbox_geom{4, 0, 1},
	     fp_mbox_geom{4, 257, 1}, fp_mbox_geom{4, 1, 0}, fp_mbox_geom{4, 1, 2049}}) {
		CHECK_FALSE(fp_mbox_geom_valid(&bad));
		std::vector<u32> ring(64), ack(FP_MBOX_ACK_WORDS), sh(64);
		fp_mbox_prod p{};
		fp_mbox_cons c{};
		fp_mbox_barriers b{[](void *) {}, [](void *) {}, [](void *) {}, nullptr};
		CHECK(fp_mbox_prod_init(&p, &bad, ring.data(), ack.data(), sh.data(), &b) == -EINVAL);
		CHECK(fp_mbox_cons_init(&c, &bad, ring.data(), ack.data(), &b) == -EINVAL);
	}
}

TEST_CASE("init zeroes each side's area; an empty drain delivers nothing")
{
	Mailbox m({3, 2, 4});
	for (u32 w : m.ring)
		CHECK(w == 0);
	for (u32 w : m.ack)
		CHECK(w == 0);
	CHECK(m.drain() == 0);
	CHECK(m.got.empty());
}

TEST_CASE("ordering: entries are delivered in posting order, then the tail is published")
{
	Mailbox m({4, 4, 32});
	std::vector<Vec> sent;
	for (u32 i = 0; i < 10; i++) {
		Vec v{i % 4, (i * 7) % 32};
		REQUIRE(m.post(v.first, v.second) == 0);
		sent.push_back(v);
	}
	CHECK(m.ring[FP_MBOX_HEAD] == 10);
	CHECK(m.drain() == 10);
	CHECK(m.got == sent);
	CHECK(m.ack[FP_MBOX_TAIL] == 10);
	CHECK(m.drain() == 0);	// nothing twice
	CHECK(m.got.size() == 10);
	CHECK(m.cons.bad == 0);
}

TEST_CASE("wraparound: many laps of a 4-entry ring, and the u32 indexes wrapping")
{
	Mailbox m({2, 1, 8});
	std::vector<Vec> sent;
	for (u32 round = 0; round < 100; round++) {
		for (u32 k = 0; k <= round % 4; k++) {
			REQUIRE(m.post(0, (round + k) % 8) == 0);
			sent.push_back({0, (round + k) % 8});
		}
		m.drain();
	}
	CHECK(m.got == sent);
	CHECK(m.cons.bad == 0);

	// Both sides near 2^32: resume a quiescent mailbox there (as after 4 billion interrupts).
	Mailbox w({2, 1, 8});
	u32 start = 0xfffffffau;
	w.prod.head = w.prod.tail = w.cons.tail = start;
	w.ring[FP_MBOX_HEAD] = start;
	w.ack[FP_MBOX_TAIL] = start;
	std::vector<Vec> sent2;
	for (u32 i = 0; i < 20; i++) {
		REQUIRE(w.post(0, i % 8) == 0);
		sent2.push_back({0, i % 8});
		if (i % 3 == 2)
			w.drain();
	}
	w.drain();
	CHECK(w.got == sent2);
	CHECK(w.prod.head == start + 20);	// wrapped past zero
	CHECK(w.cons.bad == 0);
}

TEST_CASE("overflow: a full ring falls back to the bitmap, every vector is delivered at least once")
{
	Mailbox m({2, 3, 20});	// 4 entries, 60 vectors
	std::set<Vec> sent, bitmap;
	int to_ring = 0, to_bitmap = 0;
	for (u32 i = 0; i < 200; i++) {
		Vec v{i % 3, (i * 11) % 20};
		int r = m.post(v.first, v.second);
		REQUIRE(r >= 0);
		(r == 0 ? to_ring : to_bitmap)++;
		sent.insert(v);
		if (r == 1)
			bitmap.insert(v);
	}
	CHECK(to_ring == 4);
	CHECK(to_bitmap == 196);
	CHECK(m.prod.overflowed == 196);
	CHECK(m.prod.coalesced == 196 - bitmap.size());
	CHECK(sent.size() == 60);
	CHECK(m.ring[FP_MBOX_OVF] == 196);
	m.drain();
	std::set<Vec> got(m.got.begin(), m.got.end());
	CHECK(got == sent);
	CHECK(m.cons.scans == 1);
	CHECK(m.ack[FP_MBOX_OVF_ACK] == 196);
	// The ring works again; the next overflow clears the delivered bitmap first.
	m.got.clear();
	REQUIRE(m.post(1, 1) == 0);
	for (int i = 0; i < 3; i++)
		REQUIRE(m.post(2, 2) == 0);
	REQUIRE(m.post(0, 5) == 1);
	m.drain();
	CHECK(m.got == std::vector<Vec>{{1, 1}, {2, 2}, {2, 2}, {2, 2}, {0, 5}});	// only the new bit
}

TEST_CASE("overflow onto a bit the consumer already scanned is delivered again (OVF bumps)")
{
	Mailbox m({1, 1, 4});
	REQUIRE(m.post(0, 0) == 0);
	REQUIRE(m.post(0, 0) == 0);
	REQUIRE(m.post(0, 3) == 1);	// bitmap: bit 3
	m.drain();			// delivers 0, 0, 3; acks OVF 1
	m.got.clear();
	// Ring full again; the ack of OVF 1 is there, so the bitmap is cleared before bit 3 is set again.
	REQUIRE(m.post(0, 1) == 0);
	REQUIRE(m.post(0, 1) == 0);
	REQUIRE(m.post(0, 3) == 1);
	REQUIRE(m.post(0, 3) == 1);	// coalesced onto the same bit, OVF still bumps
	CHECK(m.prod.coalesced == 1);
	m.drain();
	CHECK(m.got == std::vector<Vec>{{0, 1}, {0, 1}, {0, 3}});
}

TEST_CASE("late acknowledgements (posted writes across the NTB): randomized, nothing lost")
{
	for (u32 seed = 1; seed <= 20; seed++) {
		Mailbox m({2, 2, 40});
		std::mt19937 rng(seed);
		// The producer reads the ack area from `visible`, which lags the consumer's writes.
		std::vector<u32> visible(FP_MBOX_ACK_WORDS, 0);
		m.prod.ack_area = visible.data();
		std::map<Vec, bool> outstanding;	// posted and not delivered since
		std::set<Vec> ever;
		u64 posts = 0;
		for (int step = 0; step < 3000; step++) {
			u32 op = rng() % 10;
			if (op < 6) {
				Vec v{rng() % 2, rng() % 40};
				REQUIRE(m.post(v.first, v.second) >= 0);
				outstanding[v] = true;
				ever.insert(v);
				posts++;
			} else if (op < 8) {
				m.got.clear();
				m.drain();
				for (const Vec &v : m.got) {
					CHECK(ever.count(v) == 1);	// spurious only for vectors once raised
					outstanding[v] = false;
				}
			} else {
				visible = m.ack;	// the posted writes land (in order: all at once is fine)
			}
		}
		visible = m.ack;
		m.got.clear();
		m.drain();
		for (const Vec &v : m.got)
			outstanding[v] = false;
		for (const auto &[v, pending] : outstanding)
			CHECK_MESSAGE(!pending, "seed " << seed << ": lost (" << v.first << ", " << v.second << ")");
		CHECK(m.prod.overflowed > 0);	// the schedule did exercise the bitmap
		CHECK(m.cons.bad == 0);
	}
}

TEST_CASE("bad entries are rejected and counted, the rest delivered; a corrupt HEAD resyncs")
{
	Mailbox m({3, 2, 16});
	REQUIRE(m.post(0, 1) == 0);
	REQUIRE(m.post(1, 2) == 0);
	// A broken or hostile peer: an entry with a device slot out of range, one with a vector out of
	// range, one with a stale lap, and a dead link's all-ones.
	u32 h = m.prod.head;
	m.ring[FP_MBOX_RING + h] = fp_mbox_encode(h, 3, 5, 0);
	m.ring[FP_MBOX_RING + h + 1] = fp_mbox_encode(h + 1, 3, 0, 16);
	m.ring[FP_MBOX_RING + h + 2] = fp_mbox_encode(h + 2 + 8, 3, 0, 3);
	m.ring[FP_MBOX_RING + h + 3] = 0xffffffffu;
	m.ring[FP_MBOX_RING + h + 4] = fp_mbox_encode(h + 4, 3, 1, 15);
	m.ring[FP_MBOX_HEAD] = h + 5;
	m.prod.head = h + 5;
	CHECK(m.drain() == 3);
	CHECK(m.got == std::vector<Vec>{{0, 1}, {1, 2}, {1, 15}});
	CHECK(m.cons.bad == 4);

	CHECK(m.post(2, 0) == -EINVAL);	// the producer refuses to write them at all
	CHECK(m.post(0, 16) == -EINVAL);
	CHECK(m.ring[FP_MBOX_HEAD] == h + 5);

	// HEAD more than a ring ahead: every vector once, nothing lost.
	m.got.clear();
	m.ring[FP_MBOX_HEAD] = m.cons.tail + 9;
	CHECK(m.drain() == 2 * 16);
	CHECK(std::set<Vec>(m.got.begin(), m.got.end()).size() == 32);
	CHECK(m.cons.bad == 5);

	// The ring part alone never resyncs (it is what runs in hard irq): corrupt HEADs owe one resync,
	// however many come before the bulk part runs; it delivers every vector once.
	m.got.clear();
	for (u32 k = 1; k <= 3; k++) {
		m.ring[FP_MBOX_HEAD] = m.cons.tail + 100 * k;
		CHECK(m.drain_ring() == 0);
		CHECK(fp_mbox_bulk_due(&m.cons));
	}
	CHECK(m.cons.bad == 8);
	CHECK(m.got.empty());
	CHECK(m.drain_bulk() == 2 * 16);
	CHECK(m.cons.resyncs == 2);
	CHECK_FALSE(fp_mbox_bulk_due(&m.cons));
}

TEST_CASE("barriers: entry before HEAD, bitmap before OVF, slot loads before TAIL")
{
	Mailbox m({2, 1, 8});
	std::vector<std::string> log;
	m.on_barrier = [&](Mailbox &mb, char kind) {
		char buf[96];
		snprintf(buf, sizeof(buf), "%c head=%u ovf=%u tail=%u ack=%u", kind, mb.ring[FP_MBOX_HEAD],
			 mb.ring[FP_MBOX_OVF], mb.ack[FP_MBOX_TAIL], mb.ack[FP_MBOX_OVF_ACK]);
		log.push_back(buf);
	};
	REQUIRE(m.post(0, 6) == 0);
	// The wmb came with the entry written and HEAD still 0.
	CHECK(log == std::vector<std::string>{"w head=0 ovf=0 tail=0 ack=0"});
	CHECK(m.ring[FP_MBOX_RING] == fp_mbox_encode(0, 2, 0, 6));
	log.clear();
	m.drain();
	// rmb after loading HEAD; mb before the TAIL store (TAIL still 0 then).
	CHECK(log == std::vector<std::string>{"r head=1 ovf=0 tail=0 ack=0", "m head=1 ovf=0 tail=0 ack=0"});
	CHECK(m.ack[FP_MBOX_TAIL] == 1);

	for (int i = 0; i < 4; i++)
		REQUIRE(m.post(0, 1) == 0);
	log.clear();
	REQUIRE(m.post(0, 7) == 1);
	// The full check re-read the tail (mb), then the bitmap went out before OVF (wmb, OVF still 0).
	CHECK(log == std::vector<std::string>{"m head=5 ovf=0 tail=1 ack=0", "w head=5 ovf=0 tail=1 ack=0"});
	CHECK(m.ring[FP_MBOX_OVF] == 1);
	log.clear();
	m.drain();
	CHECK(log == std::vector<std::string>{"r head=5 ovf=1 tail=1 ack=0", "m head=5 ovf=1 tail=1 ack=0",
		"r head=5 ovf=1 tail=5 ack=0", "m head=5 ovf=1 tail=5 ack=0"});
	CHECK(m.ack[FP_MBOX_OVF_ACK] == 1);
}
