#!/bin/bash
# Fuzzes the agent (tests/fuzz/fuzz_agent_dispatch.cpp: dispatcher, sessions before and after authentication,
# a borrower facing a hostile lender, the state and config files) with libFuzzer
# under ASan and UBSan for a bounded time (FARPASS_FUZZ_SECONDS, default 30), starting from the committed
# seed corpus. Fails on any crash, sanitizer report, leak or timeout. Built with clang in build-fuzz/; the
# fuzzer is kept in FARPASS_CACHE under the hash of its sources, this script and clang's version, so a
# fresh checkout of the same agent (CI's clone) does not build it again (about 6.5 minutes on 2 cores).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/build-fuzz
seconds=${FARPASS_FUZZ_SECONDS:-30}
cache=${FARPASS_CACHE:-/var/cache/farpass}/fuzz

command -v clang++ >/dev/null || { echo "clang++ missing: run vm-images/setup.sh apt" >&2; exit 1; }
mkdir -p "$out"

# The agent's core: everything but the two mains and the hardware VFIO implementation.
sources=()
for f in "$top"/lender-agent/*.cpp; do
	case ${f##*/} in agent_main.cpp | farpassctl.cpp | vfio_linux.cpp) ;; *) sources+=("$f") ;; esac
done
inputs=("${sources[@]}" "$top"/lender-agent/*.hpp "$top"/include/uapi/farpass.h "$top"/tests/unit/agent_fakes.hpp "$top"/tests/fuzz/fuzz_agent_dispatch.cpp)
stamp=$({ cat "${inputs[@]}" "$0" && clang++ --version; } | sha256sum | cut -c1-16)
fuzzer=$cache/fuzz_agent_dispatch-$stamp
mkdir -p "$cache"
if [ ! -x "$fuzzer" ]; then
	echo "building $fuzzer"
	# One compiler per core: a single clang++ for every source takes twice as long on two cores.
	rm -rf "$out/obj" && mkdir "$out/obj"
	printf '%s\0' "$top/tests/fuzz/fuzz_agent_dispatch.cpp" "${sources[@]}" |
		xargs -0 -P "$(nproc)" -I{} sh -c 'nice clang++ -std=c++20 -g -O1 -fno-omit-frame-pointer \
			-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
			-I"$1/lender-agent" -I"$1/tests/unit" -I"$1/include" -c "$3" -o "$2/obj/$(basename "$3" .cpp).o"' \
			_ "$top" "$out" {} ||
		{ echo "building $fuzzer: a source did not compile" >&2; exit 1; }
	nice clang++ -fsanitize=fuzzer,address,undefined "$out"/obj/*.o -lssl -lcrypto -o "$cache/.partial.$$"
	# Only this version is kept; another checkout's is built again when it runs.
	rm -f "$cache"/fuzz_agent_dispatch-*
	mv "$cache/.partial.$$" "$fuzzer"
fi

# New inputs go to a scratch corpus; the committed seeds are only read.
work=$(mktemp -d "$out/run.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/tmp"
echo "fuzzing for ${seconds} s"
TMPDIR=$work/tmp nice "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
	-artifact_prefix="$out/" -print_final_stats=1 "$work/corpus" "$top/tests/fuzz/corpus" 2>"$work/log" ||
	{ tail -n 60 "$work/log" >&2; echo "fuzzer found a failure; reproducer in $out/" >&2; exit 1; }
grep -E '^stat::number_of_executed_units|^Done' "$work/log" || true
