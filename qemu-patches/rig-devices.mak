# Devices of the rig's L0 QEMU (configure --without-default-devices --with-devices-x86_64=this file).
# L1 machines: q35 with intel-iommu, serial console, virtio-9p for the host root, virtio-net for the
# management LAN, the emulated NTB, and the devices a lender lends (NVMe, e1000e, e1000, edu; q35's
# ich9-ahci and ide-hd come with it).
CONFIG_Q35=y
CONFIG_SERIAL_ISA=y
CONFIG_VTD=y
CONFIG_PCIE_PORT=y
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_NET=y
CONFIG_VIRTIO_9P=y
CONFIG_NVME_PCI=y
CONFIG_E1000E_PCI_EXPRESS=y
CONFIG_E1000_PCI=y
CONFIG_EDU=y
CONFIG_NTB_EPF=y
