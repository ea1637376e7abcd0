#include "framing.hpp"

#include "errors.hpp"

#include <cstdint>

namespace farpass::agent {

namespace {

void check_size(std::size_t size, std::size_t limit)
{
	if (size > limit)
		throw AgentError(ErrorCode::message_too_large, "message of " + std::to_string(size) +
									   " bytes exceeds the limit of " +
									   std::to_string(limit));
}

} // namespace

std::string encode_frame(std::string_view payload)
{
	check_size(payload.size(), max_frame_payload);
	const auto size = static_cast<std::uint32_t>(payload.size());
	std::string frame{static_cast<char>(size >> 24), static_cast<char>(size >> 16), static_cast<char>(size >> 8),
			  static_cast<char>(size)};
	frame.append(payload);
	return frame;
}

std::optional<std::string> FrameDecoder::next(std::size_t limit)
{
	if (buffer_.size() < frame_header_size)
		return std::nullopt;
	std::uint32_t size = 0;
	for (std::size_t i = 0; i < frame_header_size; i++)
		size = size << 8 | static_cast<unsigned char>(buffer_[i]);
	check_size(size, limit);
	if (buffer_.size() < frame_header_size + size)
		return std::nullopt;
	std::string payload = buffer_.substr(frame_header_size, size);
	buffer_.erase(0, frame_header_size + size);
	return payload;
}

} // namespace farpass::agent
