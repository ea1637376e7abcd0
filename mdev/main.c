// SPDX-License-Identifier: GPL-2.0-only
/*
 * farpass.ko - pass a PCIe device of another host, reached through an NTB, to a local VM as an mdev.
 *
 * main.c: module init/exit and the global state (fp.h). The other parts: ntb.c (NTB client, link
 * control protocol), types.c (mdev parent, types), mdev.c (the VFIO devices, with the files instance.h
 * names), chardev.c (/dev/farpass for the agent), counters.c (debugfs), proto.c (pure logic shared with
 * the unit tests).
 */
#include <linux/module.h>

#include "chardev.h"
#include "counters.h"
#include "fp.h"
#include "link.h"
#include "types.h"

DEFINE_MUTEX(fp_lock);
LIST_HEAD(fp_links);
LIST_HEAD(fp_devices);

static int __init fp_init(void)
{
	int ret;

	ret = fp_counters_init();
	if (ret)
		return ret;
	ret = fp_mdev_init();
	if (ret)
		goto err_counters;
	/* Links register mdev parents with fp_mdev_driver: the driver must exist first. */
	ret = fp_ntb_init();
	if (ret)
		goto err_mdev;
	ret = fp_chardev_init();
	if (ret)
		goto err_ntb;
	pr_info(FP_NAME ": loaded (API version %u)\n", FARPASS_API_VERSION);
	return 0;

err_ntb:
	fp_ntb_exit();
err_mdev:
	fp_mdev_exit();
err_counters:
	fp_counters_exit();
	pr_err(FP_NAME ": init failed: %pe\n", ERR_PTR(ret));
	return ret;
}

static void __exit fp_exit(void)
{
	/* The agent goes first, then the links (their parents, instances and devices), then the driver. */
	fp_chardev_exit();
	fp_ntb_exit();
	fp_mdev_exit();
	WARN_ON(!list_empty(&fp_devices));
	fp_counters_exit();
	pr_info(FP_NAME ": unloaded\n");
}

module_init(fp_init);
module_exit(fp_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("farpass: remote PCIe devices over NTB as mdevs");
MODULE_SOFTDEP("pre: mdev vfio vfio_iommu_type1 vfio_virqfd");
