// farpass-client: a test client for /dev/farpass and farpass mdevs, acting as the agent (and, for
// `vfio-info`, as QEMU does). One action per run; prints "ok ..." or "err ENAME (N)" and exits 0 when
// the outcome is the one --expect names (default: ok), 1 otherwise, 2 on usage errors.
//
//   farpass-client version [--api N] [--argsz N]
//   farpass-client announce --id N --lender NAME --ntb PCI [--addr PCI] [--vendor X] [--device X]
//                  [--class X] [--bar0 SIZE] [--argsz N] [--flags N] [--tail N [--tail-byte X]]
//                  [--no-version]
//   farpass-client withdraw --id N [--no-version]
//   farpass-client open                                   (just open /dev/farpass)
//   farpass-client unknown-ioctl                          (after VERSION: an unknown command number)
//   farpass-client upcall-get                             (reserved: expect EOPNOTSUPP)
//   farpass-client vfio-info UUID [--hold S]              (VFIO group/container/device, GET_INFO;
//                                                          keep it open S seconds)
// All: [--expect ok|ENAME] [--dev PATH]
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <linux/vfio.h>
#include <map>
#include <string>
#include <string_view>
#include <sys/ioctl.h>
#include <unistd.h>
#include <vector>

#include "uapi/farpass.h"

namespace {

struct Args {
	std::string action;
	std::vector<std::string> positional;
	std::map<std::string, std::string> opt;
	bool has(const std::string &k) const { return opt.contains(k); }
	std::string str(const std::string &k, const std::string &def = "") const
	{
		auto it = opt.find(k);
		return it == opt.end() ? def : it->second;
	}
	unsigned long long num(const std::string &k, unsigned long long def) const
	{
		auto it = opt.find(k);
		return it == opt.end() ? def : std::strtoull(it->second.c_str(), nullptr, 0);
	}
};

// The outcome of the action: 0 or an errno.
int finish(const Args &a, int err, const std::string &detail)
{
	std::string got = err ? std::string(strerrorname_np(err)) : "ok";
	if (err)
		std::printf("err %s (%d)%s%s\n", got.c_str(), err, detail.empty() ? "" : ": ", detail.c_str());
	else
		std::printf("ok%s%s\n", detail.empty() ? "" : " ", detail.c_str());
	std::string want = a.str("expect", "ok");
	if (got != want) {
		std::printf("FAIL: expected %s\n", want.c_str());
		return 1;
	}
	return 0;
}

void copy_name(char (&dst)[FARPASS_NAME_LEN], const std::string &s)
{
	std::memset(dst, 0, sizeof(dst));
	std::memcpy(dst, s.data(), std::min(s.size(), sizeof(dst)));	// may be unterminated on purpose
}

int negotiate(int fd, const Args &a)
{
	if (a.has("no-version"))
		return 0;
	farpass_version v{};
	v.argsz = sizeof(v);
	v.version = FARPASS_API_VERSION;
	return ioctl(fd, FARPASS_IOCTL_VERSION, &v) ? errno : 0;
}

int run_vfio_info(const Args &a)
{
	if (a.positional.empty())
		return 2;
	const std::string uuid = a.positional[0];
	namespace fs = std::filesystem;
	std::error_code ec;
	auto grp = fs::read_symlink("/sys/bus/mdev/devices/" + uuid + "/iommu_group", ec);
	if (ec)
		return finish(a, ENOENT, "no iommu_group for " + uuid);
	std::string gpath = "/dev/vfio/" + grp.filename().string();
	int container = open("/dev/vfio/vfio", O_RDWR);
	if (container < 0)
		return finish(a, errno, "/dev/vfio/vfio");
	int group = open(gpath.c_str(), O_RDWR);
	if (group < 0)
		return finish(a, errno, gpath);
	vfio_group_status st{};
	st.argsz = sizeof(st);
	if (ioctl(group, VFIO_GROUP_GET_STATUS, &st) || !(st.flags & VFIO_GROUP_FLAGS_VIABLE))
		return finish(a, errno ? errno : EINVAL, "group not viable");
	if (ioctl(group, VFIO_GROUP_SET_CONTAINER, &container))
		return finish(a, errno, "VFIO_GROUP_SET_CONTAINER");
	if (ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1v2_IOMMU))
		return finish(a, errno, "VFIO_SET_IOMMU");
	int dev = ioctl(group, VFIO_GROUP_GET_DEVICE_FD, uuid.c_str());
	if (dev < 0)
		return finish(a, errno, "VFIO_GROUP_GET_DEVICE_FD");
	vfio_device_info info{};
	info.argsz = sizeof(info);
	if (ioctl(dev, VFIO_DEVICE_GET_INFO, &info))
		return finish(a, errno, "VFIO_DEVICE_GET_INFO");
	vfio_region_info ri{};
	ri.argsz = sizeof(ri);
	ri.index = VFIO_PCI_CONFIG_REGION_INDEX;
	int rerr = ioctl(dev, VFIO_DEVICE_GET_REGION_INFO, &ri) ? errno : 0;
	char buf[4];
	int rderr = pread(dev, buf, sizeof(buf), 0) < 0 ? errno : 0;
	char detail[256];
	std::snprintf(detail, sizeof(detail), "flags=%#x pci=%d reset=%d regions=%u irqs=%u region_info=%s read=%s",
		      info.flags, !!(info.flags & VFIO_DEVICE_FLAGS_PCI), !!(info.flags & VFIO_DEVICE_FLAGS_RESET),
		      info.num_regions, info.num_irqs, rerr ? strerrorname_np(rerr) : "ok",
		      rderr ? strerrorname_np(rderr) : "ok");
	bool good = (info.flags & VFIO_DEVICE_FLAGS_PCI) && (info.flags & VFIO_DEVICE_FLAGS_RESET);
	if (unsigned hold = static_cast<unsigned>(a.num("hold", 0)))
		sleep(hold);	// keep the device open, as a running VM would
	close(dev);
	close(group);
	close(container);
	return finish(a, good ? 0 : EINVAL, detail);
}

int run(const Args &a)
{
	if (a.action == "vfio-info")
		return run_vfio_info(a);
	int fd = open(a.str("dev", FARPASS_DEV_PATH).c_str(), O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return finish(a, errno, "open");
	if (a.action == "open")
		return finish(a, 0, "");
	if (a.action == "version") {
		farpass_version v{};
		v.argsz = static_cast<uint32_t>(a.num("argsz", sizeof(v)));
		v.version = static_cast<uint32_t>(a.num("api", FARPASS_API_VERSION));
		int err = ioctl(fd, FARPASS_IOCTL_VERSION, &v) ? errno : 0;
		char d[128];
		std::snprintf(d, sizeof(d), "kernel_version=%u max_devices=%u features=%#llx", v.version,
			      v.max_devices, static_cast<unsigned long long>(v.features));
		return finish(a, err, d);
	}
	if (int err = negotiate(fd, a))
		return finish(a, err, "VERSION");
	if (a.action == "announce") {
		farpass_announce an{};
		an.argsz = static_cast<uint32_t>(a.num("argsz", sizeof(an)));
		an.flags = static_cast<uint32_t>(a.num("flags", 0));
		an.device_id = static_cast<uint32_t>(a.num("id", 1));
		an.vendor = static_cast<uint16_t>(a.num("vendor", 0x1b36));
		an.device = static_cast<uint16_t>(a.num("device", 0x0010));
		an.class_code = static_cast<uint32_t>(a.num("class", 0x010802));
		copy_name(an.lender, a.str("lender", "lender"));
		copy_name(an.lender_addr, a.str("addr", "0000:00:08.0"));
		copy_name(an.ntb, a.str("ntb", "0000:00:0a.0"));
		an.bars[0].size = a.num("bar0", 0x4000);
		an.bars[0].flags = FARPASS_BAR_MEM64;
		// --tail N: pass a struct N bytes larger than this uapi's (a newer agent), whose last byte is
		// --tail-byte (default 0): the kernel accepts zeros it does not know, and nothing else.
		std::vector<unsigned char> buf(sizeof(an) + a.num("tail", 0));
		if (buf.size() > sizeof(an)) {
			an.argsz = static_cast<uint32_t>(buf.size());
			buf.back() = static_cast<unsigned char>(a.num("tail-byte", 0));
		}
		std::memcpy(buf.data(), &an, sizeof(an));
		int err = ioctl(fd, FARPASS_IOCTL_ANNOUNCE_DEVICE, buf.data()) ? errno : 0;
		std::memcpy(&an, buf.data(), sizeof(an));
		return finish(a, err, err ? "" : "flags=" + std::to_string(an.flags));
	}
	if (a.action == "withdraw") {
		farpass_withdraw w{};
		w.argsz = sizeof(w);
		w.device_id = static_cast<uint32_t>(a.num("id", 1));
		int err = ioctl(fd, FARPASS_IOCTL_WITHDRAW_DEVICE, &w) ? errno : 0;
		return finish(a, err, err ? "" : "flags=" + std::to_string(w.flags));
	}
	if (a.action == "unknown-ioctl") {
		farpass_version v{};
		v.argsz = sizeof(v);
		int err = ioctl(fd, _IOWR(FARPASS_IOCTL_TYPE, 99, struct farpass_version), &v) ? errno : 0;
		return finish(a, err, "");
	}
	if (a.action == "upcall-get") {
		farpass_upcall_req r{};
		r.argsz = sizeof(r);
		int err = ioctl(fd, FARPASS_IOCTL_UPCALL_GET, &r) ? errno : 0;
		return finish(a, err, "");
	}
	std::fprintf(stderr, "unknown action %s\n", a.action.c_str());
	return 2;
}

} // namespace

int main(int argc, char **argv)
{
	Args a;
	if (argc < 2) {
		std::fprintf(stderr, "usage: farpass-client ACTION [options] (see the source)\n");
		return 2;
	}
	a.action = argv[1];
	for (int i = 2; i < argc; i++) {
		std::string_view s = argv[i];
		if (s.starts_with("--")) {
			std::string key(s.substr(2));
			if (key == "no-version")
				a.opt[key] = "1";
			else if (i + 1 < argc)
				a.opt[key] = argv[++i];
			else
				return 2;
		} else {
			a.positional.emplace_back(s);
		}
	}
	return run(a);
}
