// SPDX-License-Identifier: GPL-2.0-only
/*
 * proto.c - pure logic shared by farpass.ko and its unit tests; see proto.h. No kernel headers beyond
 * types and snprintf, so the same file compiles in userspace.
 */
#ifdef __KERNEL__
#include <linux/kernel.h>
#include <linux/string.h>
#else
#include <stdio.h>
#include <string.h>
#endif

#include "proto.h"

int fp_hello_check(u32 word, u32 *version, u32 *roles)
{
	if (word >> 16 != FP_MAGIC)
		return -1;
	*version = (word >> 8) & 0xff;
	*roles = word & 0xff;
	return *version == FP_PROTO_VERSION ? 0 : -2;
}

static bool fp_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_';
}

bool fp_lender_name_valid(const char *name, size_t bufsize)
{
	size_t i;

	for (i = 0; i < bufsize; i++) {
		if (name[i] == '\0')
			return i > 0;
		if (!fp_name_char(name[i]))
			return false;
	}
	return false;	/* not NUL-terminated inside the buffer */
}

int fp_type_sysfs_name(char *buf, size_t size, const char *lender, unsigned int slot)
{
	int n = snprintf(buf, size, "farpass-%s-%u", lender, slot);

	return n < 0 || (size_t)n >= size ? -1 : n;
}

int fp_type_pretty_name(char *buf, size_t size, const char *lender, unsigned int slot)
{
	int n = snprintf(buf, size, "%s slot %u", lender, slot);

	return n < 0 || (size_t)n >= size ? -1 : n;
}

int fp_device_label(char *buf, size_t size, const char *lender, unsigned int vendor, unsigned int device,
		    const char *lender_addr)
{
	int n;

	if (lender_addr[0])
		n = snprintf(buf, size, "%s %04x:%04x (%s)", lender, vendor, device, lender_addr);
	else
		n = snprintf(buf, size, "%s %04x:%04x", lender, vendor, device);
	return n < 0 || (size_t)n >= size ? -1 : n;
}
