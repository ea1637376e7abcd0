// Vfio on the kernel's VFIO type1 IOMMU interface (linux/vfio.h).
#pragma once

#include "vfio.hpp"

namespace farpass::agent {

class LinuxVfio final : public Vfio {
public:
	std::unique_ptr<VfioDevice> open(const std::string &pci_address, int iommu_group) override;
	std::unique_ptr<VfioDevice> adopt(const std::string &pci_address, int iommu_group, std::vector<Fd> fds) override;
};

} // namespace farpass::agent
