#include "state_store.hpp"

#include "errors.hpp"
#include "protocol.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace farpass::agent {

namespace {

void write_fully(int fd, const std::string &data, const std::string &what)
{
	std::size_t done = 0;
	while (done < data.size()) {
		const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			throw_system_error("writing " + what);
		done += static_cast<std::size_t>(n);
	}
}

void fsync_path(const std::filesystem::path &path, int flags)
{
	const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
	if (fd < 0)
		throw_system_error("opening " + path.string());
	const int rc = ::fsync(fd);
	::close(fd);
	if (rc != 0)
		throw_system_error("fsync " + path.string());
}

} // namespace

StateStore::StateStore(std::filesystem::path directory, std::string name)
	: directory_(std::move(directory)), file_(directory_ / name), temporary_(directory_ / (name + ".tmp"))
{
}

std::optional<nlohmann::json> StateStore::load(int version) const
{
	std::ifstream in(file_);
	if (!in)
		return std::nullopt;
	std::ostringstream text;
	text << in.rdbuf();
	nlohmann::json state;
	try {
		state = parse_json(text.str());
	} catch (const AgentError &e) {
		throw AgentError(ErrorCode::internal_error, "corrupt state file " + file_.string() + ": " + e.what());
	}
	// Checked here, before any caller reads a member: value() on a non-object, or of the wrong type, throws.
	const auto found = state.is_object() ? state.find("version") : state.end();
	if (!state.is_object() || found == state.end() || !found->is_number_integer() || *found != version)
		throw AgentError(ErrorCode::internal_error,
				 "state file " + file_.string() + " is not a version " + std::to_string(version) +
					 " state object (its version: " +
					 (found == state.end() ? std::string("none") : found->dump()) + ")");
	return state;
}

void StateStore::save(const nlohmann::json &state) const
{
	const std::filesystem::path &temporary = temporary_;
	const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		throw_system_error("creating " + temporary.string());
	try {
		write_fully(fd, state.dump(1, '\t') + "\n", temporary.string());
		if (::fsync(fd) != 0)
			throw_system_error("fsync " + temporary.string());
	} catch (...) {
		::close(fd);
		throw;
	}
	::close(fd);
	if (::rename(temporary.c_str(), file_.c_str()) != 0)
		throw_system_error("renaming " + temporary.string());
	fsync_path(directory_, O_RDONLY | O_DIRECTORY);
}

} // namespace farpass::agent
