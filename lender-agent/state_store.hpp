// The agent's persistent state: one JSON document, replaced atomically.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace farpass::agent {

class StateStore {
public:
	// The file is <directory>/<name> (state.json for the lender's devices and leases, borrower.json for
	// the borrower's announced devices).
	explicit StateStore(std::filesystem::path directory, std::string name = "state.json");

	// The document, if the file exists; throws unless it is a JSON object whose "version" is VERSION.
	std::optional<nlohmann::json> load(int version) const;
	// Writes a temporary file, fsyncs it, renames it over the old state and fsyncs the directory: a crash
	// at any point leaves either the old or the new state, never a torn one.
	void save(const nlohmann::json &state) const;

private:
	std::filesystem::path directory_;
	std::filesystem::path file_;
	std::filesystem::path temporary_;
};

} // namespace farpass::agent
