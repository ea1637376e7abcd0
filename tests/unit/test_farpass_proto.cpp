// farpass.ko's pure logic (mdev/proto.c, compiled from the same source as the module): the NTB control
// protocol's scratchpad words and the names of mdev types.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "proto.h"

#include <cstring>
#include <string>

TEST_CASE("control words: command and sequence number round-trip, 24-bit sequence wraps")
{
	for (u32 cmd : {FP_CMD_NONE, FP_CMD_HELLO, FP_CMD_HELLO_ACK}) {
		for (u32 seq : {0u, 1u, 0x123456u, FP_SEQ_MASK}) {
			u32 w = fp_cmd_word(static_cast<enum fp_cmd>(cmd), seq);
			CHECK(fp_cmd_of(w) == cmd);
			CHECK(fp_seq_of(w) == seq);
		}
	}
	CHECK(fp_seq_of(fp_cmd_word(FP_CMD_HELLO, FP_SEQ_MASK + 1)) == 0);
	CHECK(fp_cmd_word(FP_CMD_NONE, 0) == 0);	// an empty mailbox is all-zero
}

TEST_CASE("hello word: ours, another version, garbage and a dead link's all-ones")
{
	u32 version = 0, roles = 0;
	u32 w = fp_hello_word(FP_ROLE_BORROWER | FP_ROLE_LENDER);
	CHECK((w >> 16) == FP_MAGIC);
	CHECK(fp_hello_check(w, &version, &roles) == 0);
	CHECK(version == FP_PROTO_VERSION);
	CHECK(roles == (FP_ROLE_BORROWER | FP_ROLE_LENDER));

	CHECK(fp_hello_check(FP_MAGIC << 16 | (FP_PROTO_VERSION + 1) << 8 | FP_ROLE_LENDER, &version, &roles) == -2);
	CHECK(version == FP_PROTO_VERSION + 1);
	CHECK(fp_hello_check(0, &version, &roles) == -1);
	CHECK(fp_hello_check(0xffffffffu, &version, &roles) == -1);
	CHECK(fp_cmd_of(0xffffffffu) != FP_CMD_NONE);	// a dead link never reads as an empty mailbox
}

TEST_CASE("lender names: [A-Za-z0-9._]{1,31}, NUL inside the buffer")
{
	char buf[32];
	auto valid = [&](const char *s) {
		std::memset(buf, 0, sizeof(buf));
		std::strncpy(buf, s, sizeof(buf));
		return fp_lender_name_valid(buf, sizeof(buf));
	};
	CHECK(valid("lender"));
	CHECK(valid("host_1.example"));
	CHECK(valid(std::string(31, 'a').c_str()));
	CHECK_FALSE(valid(""));
	CHECK_FALSE(valid("bad-name"));	// '-' separates the parts of a type name
	CHECK_FALSE(valid("with space"));
	CHECK_FALSE(valid("slash/"));
	std::memset(buf, 'a', sizeof(buf));	// 32 characters, no NUL
	CHECK_FALSE(fp_lender_name_valid(buf, sizeof(buf)));
}

TEST_CASE("type names: one per slot of a lender")
{
	char buf[64];
	CHECK(fp_type_sysfs_name(buf, sizeof(buf), "lender", 7) == 16);
	CHECK(std::string(buf) == "farpass-lender-7");
	// The longest lender name with the largest slot fits fp_slot's buffers.
	CHECK(fp_type_sysfs_name(buf, sizeof(buf), std::string(31, 'l').c_str(), 15) > 0);
	CHECK(fp_type_sysfs_name(buf, 10, "lender", 7) == -1);	// does not fit

	char pretty[48];
	CHECK(fp_type_pretty_name(pretty, sizeof(pretty), "lender", 3) > 0);
	CHECK(std::string(pretty) == "lender slot 3");
	CHECK(fp_type_pretty_name(pretty, sizeof(pretty), std::string(31, 'l').c_str(), 15) > 0);
	CHECK(fp_type_pretty_name(pretty, 8, "lender", 3) == -1);

	char label[80];	// as mdev.c's description sizes it
	CHECK(fp_device_label(label, sizeof(label), "lender", 0x1b36, 0x10, "0000:00:08.0") > 0);
	CHECK(std::string(label) == "lender 1b36:0010 (0000:00:08.0)");
	CHECK(fp_device_label(label, sizeof(label), "h", 0x8086, 0x10d3, "") > 0);
	CHECK(std::string(label) == "h 8086:10d3");
	CHECK(fp_device_label(label, sizeof(label), std::string(31, 'l').c_str(), 0xffff, 0xffff,
			      std::string(31, 'a').c_str()) > 0);
	CHECK(fp_device_label(label, 8, "lender", 0x1b36, 0x10, "") == -1);
}
