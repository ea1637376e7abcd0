// The agent's persistent state: one JSON document, replaced atomically.
#pragma once

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

namespace farpass::agent {

class StateStore {
public:
	explicit StateStore(std::filesystem::path directory);

	std::optional<nlohmann::json> load() const;
	// Writes a temporary file, fsyncs it, renames it over the old state and fsyncs the directory: a crash
	// at any point leaves either the old or the new state, never a torn one.
	void save(const nlohmann::json &state) const;

private:
	std::filesystem::path directory_;
	std::filesystem::path file_;
};

} // namespace farpass::agent
