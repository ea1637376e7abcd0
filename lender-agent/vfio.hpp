// The lender's VFIO access to a lent device. The container opened for a device is its private
// lender-IOMMU domain: the only DMA it can do is to what map_dma put there.
#pragma once

#include "fd.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace farpass::agent {

class VfioDevice {
public:
	virtual ~VfioDevice() = default;

	// Config space through the VFIO config region; width is 1, 2 or 4 bytes.
	virtual std::uint32_t read_config(std::uint32_t offset, unsigned width) = 0;
	virtual void write_config(std::uint32_t offset, unsigned width, std::uint32_t value) = 0;
	virtual void reset() = 0;
	// VFIO_DEVICE_SET_IRQS on IRQ index `index` (VFIO_PCI_INTX/MSI/MSIX_IRQ_INDEX): trigger fds[i] for
	// vector i; no fds disables the index.
	virtual void set_irqs(unsigned index, std::span<const int> fds) = 0;
	// VFIO_DEVICE_SET_IRQS ACTION_UNMASK on INTx (armed): each signal of fd unmasks the line VFIO
	// automasked when it fired.
	virtual void set_intx_unmask(int fd) = 0;
	// VFIO_IOMMU_MAP_DMA: device DMA to [iova, iova + size) reaches process memory at vaddr.
	virtual void map_dma(std::uint64_t iova, std::uint64_t size, std::uint64_t vaddr) = 0;
	virtual void unmap_dma(std::uint64_t iova, std::uint64_t size) = 0;
	// VFIO_IOMMU_MAP_DMA of peer's BAR `bar` (its first size bytes) at iova: peer-to-peer between two
	// devices of this host. Throws AgentError (EINVAL: the BAR cannot be mmapped or is smaller).
	virtual void map_dma_to_bar(std::uint64_t iova, std::uint64_t size, VfioDevice &peer, unsigned bar) = 0;
	// Every mapping of the container (VFIO_DMA_UNMAP_FLAG_ALL), known or not.
	virtual void unmap_all_dma() = 0;
	// What keeps the device as it is while open (container, group, device), for the descriptor store.
	virtual std::vector<int> descriptors() const = 0;
};

class Vfio {
public:
	virtual ~Vfio() = default;
	// Opens the device's group and a fresh container for it. Throws AgentError.
	virtual std::unique_ptr<VfioDevice> open(const std::string &pci_address, int iommu_group) = 0;
	// Takes over the descriptors a previous agent stored (docs/agent-protocol.md, "Adoption"): the
	// device keeps its state, interrupts and mappings. Throws AgentError, closing them, unless they are
	// the container, group and device of pci_address in iommu_group.
	virtual std::unique_ptr<VfioDevice> adopt(const std::string &pci_address, int iommu_group, std::vector<Fd> fds) = 0;
};

} // namespace farpass::agent
