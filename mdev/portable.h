/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * portable.h - the kernel's fixed-width types for the module's kernel-independent files (proto, cfg,
 * ramscan, winlayout, mailbox), so the same sources build into farpass.ko and into the doctest tests.
 */
#ifndef FARPASS_PORTABLE_H
#define FARPASS_PORTABLE_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#endif

#endif
