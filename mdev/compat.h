/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * compat.h - the kernel interfaces whose form differs between the kernels farpass.ko supports (Linux 6.1
 * and 6.12), behind one name each, so that no other file tests the kernel version.
 */
#ifndef FARPASS_COMPAT_H
#define FARPASS_COMPAT_H

#include <linux/eventfd.h>
#include <linux/iommu.h>
#include <linux/mm.h>
#include <linux/vfio.h>
#include <linux/version.h>

/* 6.8 dropped eventfd_signal()'s count, which every caller passed as 1. */
static inline void fp_eventfd_signal(struct eventfd_ctx *ctx)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
	eventfd_signal(ctx);
#else
	eventfd_signal(ctx, 1);
#endif
}

/* 6.3 made vma->vm_flags read-only outside these helpers (they assert the mmap lock). */
static inline void fp_vm_flags_set(struct vm_area_struct *vma, vm_flags_t flags)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_set(vma, flags);
#else
	vma->vm_flags |= flags;
#endif
}

/* 6.3 added the allocation flags of the page-table pages iommu_map() may need. */
static inline int fp_iommu_map(struct iommu_domain *domain, unsigned long iova, phys_addr_t paddr,
			       size_t size, int prot)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	return iommu_map(domain, iova, paddr, size, prot, GFP_KERNEL);
#else
	return iommu_map(domain, iova, paddr, size, prot);
#endif
}

/*
 * The vfio_device_ops of a device with nothing of its own to free, whose DMA the VFIO core's emulated
 * IOMMU tracks (vfio_pin_pages() and .dma_unmap). Until 6.2 .release had to free the device itself
 * (vfio_free_device(), since gone: the core frees it). Since 6.6 a device must also have the four
 * iommufd operations, whichever interface QEMU opens it through (container or iommufd).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 6, 0)
#define FP_VFIO_EMULATED_IOMMU_OPS					\
	.bind_iommufd = vfio_iommufd_emulated_bind,			\
	.unbind_iommufd = vfio_iommufd_emulated_unbind,			\
	.attach_ioas = vfio_iommufd_emulated_attach_ioas,		\
	.detach_ioas = vfio_iommufd_emulated_detach_ioas
#elif LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
static inline void fp_vfio_free_device(struct vfio_device *vdev)
{
	vfio_free_device(vdev);
}
#define FP_VFIO_EMULATED_IOMMU_OPS .release = fp_vfio_free_device
#else
#error "farpass.ko supports Linux 6.1 and 6.6 or later"
#endif

#endif
